-- Extends this gateway's live concurrency leases of one tenant; a lease already gone (it
-- lapsed, or the request ended) is not brought back.
-- KEYS: leases. ARGV: lease lifetime ms, then the lease ids.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local lease_ms = tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], 'XX', now + lease_ms, ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], lease_ms * 2)
return 1

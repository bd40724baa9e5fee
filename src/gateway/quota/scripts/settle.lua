-- Corrects a tenant's tokens bucket by what a request really used minus what it reserved,
-- as quota/bucket.rs `settle` does: the level may fall into debt, never below one bucket.
-- KEYS: tokens bucket. ARGV: tokens per minute, delta, bucket key lifetime ms.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local capacity, delta, key_ms = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local stored = redis.call('HMGET', KEYS[1], 'level', 'at')
local value, at = tonumber(stored[1]), tonumber(stored[2])
if not value then
  value = capacity
else
  value = math.min(capacity, value + math.max(0, now - at) * capacity / 60000)
end
value = math.max(-capacity, math.min(capacity, value - delta))
redis.call('HSET', KEYS[1], 'level', tostring(value), 'at', now)
redis.call('PEXPIRE', KEYS[1], key_ms)
return 1

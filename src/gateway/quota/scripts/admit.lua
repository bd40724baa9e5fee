-- Admits one request of a tenant, atomically across every gateway sharing this Redis: the
-- requests and tokens buckets (the same token buckets as quota/bucket.rs, refilled from
-- Redis's own clock so gateways' clocks do not matter) and the concurrency leases (a sorted
-- set scored by expiry, so a crashed gateway's leases lapse instead of leaking).
-- KEYS: requests bucket, tokens bucket, leases.
-- ARGV: requests per minute, tokens per minute, prompt tokens, max concurrent (0: no such
-- limit), lease id, lease lifetime ms, bucket key lifetime ms.
-- Returns {refused (0: admitted, 1 requests, 2 tokens, 3 concurrent), wait ms,
-- requests remaining, requests reset ms, tokens remaining, tokens reset ms}.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2])
local prompt, max_concurrent = tonumber(ARGV[3]), tonumber(ARGV[4])
local lease, lease_ms, key_ms = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])

local function level(key, capacity)
  local stored = redis.call('HMGET', key, 'level', 'at')
  local value, at = tonumber(stored[1]), tonumber(stored[2])
  if not value then return capacity end
  return math.min(capacity, value + math.max(0, now - at) * capacity / 60000)
end
local function wait_ms(value, need, capacity)
  local missing = math.min(need, capacity) - value
  if missing <= 0 then return 0 end
  return math.ceil(missing * 60000 / capacity)
end
local function save(key, value)
  redis.call('HSET', key, 'level', tostring(value), 'at', now)
  redis.call('PEXPIRE', key, key_ms)
end

local refused, wait = 0, 0
local requests, tokens = 0, 0
if rpm > 0 then
  requests = level(KEYS[1], rpm)
  local w = wait_ms(requests, 1, rpm)
  if w > 0 then refused, wait = 1, w end
end
if tpm > 0 then
  tokens = level(KEYS[2], tpm)
  local w = wait_ms(tokens, prompt, tpm)
  if w > 0 and w > wait then refused, wait = 2, w end
end
if max_concurrent > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if refused == 0 and redis.call('ZCARD', KEYS[3]) >= max_concurrent then
    -- A place frees when a response ends: no better hint than a second.
    refused, wait = 3, 1000
  end
end
if refused == 0 then
  if rpm > 0 then
    requests = requests - 1
    save(KEYS[1], requests)
  end
  if tpm > 0 then
    tokens = tokens - math.min(prompt, tpm)
    save(KEYS[2], tokens)
  end
  if max_concurrent > 0 then
    redis.call('ZADD', KEYS[3], now + lease_ms, lease)
    redis.call('PEXPIRE', KEYS[3], lease_ms * 2)
  end
end
local function remaining(value) return math.floor(math.max(value, 0)) end
local function reset(value, capacity)
  if capacity <= 0 then return 0 end
  return math.ceil(math.max(0, capacity - value) * 60000 / capacity)
end
return {refused, wait, remaining(requests), reset(requests, rpm), remaining(tokens), reset(tokens, tpm)}

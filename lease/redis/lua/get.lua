-- get: read the live lease of a run; an expired lease is not returned, even
-- before it is reaped. Read-only.
--
-- KEYS[1] leases (hash: task -> "fence:worker"),
-- KEYS[2] lease expiry (zset: task -> expiry, ms on the Redis clock)
-- ARGV[1] task ID
-- Returns {fence, worker, expires_ms} for a live lease, {} for none.
local leases_key, expiry_key = KEYS[1], KEYS[2]
local task = ARGV[1]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local exp = redis.call('ZSCORE', expiry_key, task)
if not exp or tonumber(exp) <= now then
  return {}
end
local holder = redis.call('HGET', leases_key, task)
if not holder then
  return {}
end
local sep = string.find(holder, ':', 1, true)
return {string.sub(holder, 1, sep - 1), string.sub(holder, sep + 1), exp}

-- release: drop a live lease if it carries the given token, and its quota
-- charge. An expired lease is left for the reaper.
--
-- KEYS[1] leases (hash: task -> "fence:worker"),
-- KEYS[2] lease expiry (zset: task -> expiry, ms on the Redis clock),
-- KEYS[3] quota charges (hash: task -> "user|gpus"),
-- KEYS[4] quota use (hash: "g:<user>" / "r:<user>" -> charged)
-- ARGV[1] task ID, ARGV[2] fence (decimal)
-- Returns 1 released, 0 lost (no lease, another token, or expired:
-- core.ErrLeaseLost).
local leases_key, expiry_key, charges_key, use_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local task, want = ARGV[1], ARGV[2] .. ':'

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local exp = redis.call('ZSCORE', expiry_key, task)
if not exp or tonumber(exp) <= now then
  return 0
end
local holder = redis.call('HGET', leases_key, task)
if not holder or string.sub(holder, 1, #want) ~= want then
  return 0
end
redis.call('HDEL', leases_key, task)
redis.call('ZREM', expiry_key, task)
give_back(charges_key, use_key, task)
return 1

-- restore: put back a lease with a known token after the lease state was
-- lost, unless another live lease exists. The counter is raised to at least
-- the token in every case, so later claims stay above every known token.
-- The same live lease (same token and worker) is renewed.
--
-- KEYS[1] fence counter (string), KEYS[2] leases (hash: task -> "fence:worker"),
-- KEYS[3] lease expiry (zset: task -> expiry, ms on the Redis clock)
-- ARGV[1] task ID, ARGV[2] worker ID, ARGV[3] fence (decimal, > 0), ARGV[4] ttl in ms (> 0)
-- Returns {1, expires_ms}: restored (or renewed).
--         {0, fence, worker}: another live lease is held (core.ErrLeaseHeld).
local fence_key, leases_key, expiry_key = KEYS[1], KEYS[2], KEYS[3]
local task, worker, fence, ttl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])

-- a > b for canonical decimal strings, exact at any size.
local function greater(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local cur = redis.call('GET', fence_key)
if not cur or greater(fence, cur) then
  redis.call('SET', fence_key, fence)
end

local holder = fence .. ':' .. worker
local exp = redis.call('ZSCORE', expiry_key, task)
local live = redis.call('HGET', leases_key, task)
if exp and live and tonumber(exp) > now then
  if live ~= holder then
    local sep = string.find(live, ':', 1, true)
    return {0, string.sub(live, 1, sep - 1), string.sub(live, sep + 1)}
  end
end

local expires = now + ttl
redis.call('HSET', leases_key, task, holder)
redis.call('ZADD', expiry_key, string.format('%.0f', expires), task)
return {1, expires}

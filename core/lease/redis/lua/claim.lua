-- claim: lease a run to a worker for ttl and hand out a new fencing token.
-- An expired lease that no reaper took yet is replaced (its token is dead).
--
-- KEYS[1] fence counter (string), KEYS[2] leases (hash: task -> "fence:worker"),
-- KEYS[3] lease expiry (zset: task -> expiry, ms on the Redis clock)
-- ARGV[1] task ID, ARGV[2] worker ID, ARGV[3] ttl in ms (> 0)
-- Returns {1, fence, expires_ms}: claimed.
--         {0, fence, worker}: a live lease is held (core.ErrLeaseHeld).
-- Fences travel as decimal strings: Lua numbers are doubles and would round
-- tokens above 2^53.
local fence_key, leases_key, expiry_key = KEYS[1], KEYS[2], KEYS[3]
local task, worker, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])

-- KEYS[4], when given, is the ready marker: without it the counter may
-- have restarted from zero. Returns {-1, '0', ''} (lease.ErrReset).
if KEYS[4] and redis.call('EXISTS', KEYS[4]) == 0 then
  return {-1, '0', ''}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local exp = redis.call('ZSCORE', expiry_key, task)
local holder = redis.call('HGET', leases_key, task)
if exp and holder and tonumber(exp) > now then
  local sep = string.find(holder, ':', 1, true)
  return {0, string.sub(holder, 1, sep - 1), string.sub(holder, sep + 1)}
end

-- INCR's reply is a Lua number; GET reads the counter back exactly.
redis.call('INCR', fence_key)
local fence = redis.call('GET', fence_key)
local expires = now + ttl
redis.call('HSET', leases_key, task, fence .. ':' .. worker)
redis.call('ZADD', expiry_key, string.format('%.0f', expires), task)
return {1, fence, expires}

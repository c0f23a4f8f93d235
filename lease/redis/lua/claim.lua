-- claim: lease a run to a worker for ttl and hand out a new fencing token,
-- charging the run to its owner's quota in the same step. An expired lease
-- that no reaper took yet is replaced (its token is dead, its charge
-- dropped).
--
-- KEYS[1] fence counter (string), KEYS[2] leases (hash: task -> "fence:worker"),
-- KEYS[3] lease expiry (zset: task -> expiry, ms on the Redis clock),
-- KEYS[4] quota charges (hash: task -> "user|gpus"),
-- KEYS[5] quota use (hash: "g:<user>" -> GPUs, "r:<user>" -> runs charged)
-- ARGV[1] task ID, ARGV[2] worker ID, ARGV[3] ttl in ms (> 0),
-- ARGV[4] user ('' charges nothing), ARGV[5] GPUs, ARGV[6] most GPUs,
-- ARGV[7] most runs (< 0: no cap)
-- Returns {1, fence, expires_ms}: claimed.
--         {0, fence, worker}: a live lease is held (core.ErrLeaseHeld).
--         {-2, gpus, runs}: the user's charged GPUs and runs, the claim
--         would pass a cap (lease.ErrQuota); nothing claimed.
-- Fences travel as decimal strings: Lua numbers are doubles and would round
-- tokens above 2^53.
local fence_key, leases_key, expiry_key, charges_key, use_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local task, worker, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local user, gpus, max_gpus, max_runs = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])

-- KEYS[6], when given, is the ready marker: without it the counter may
-- have restarted from zero. Returns {-1, '0', ''} (lease.ErrReset).
if KEYS[6] and redis.call('EXISTS', KEYS[6]) == 0 then
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

-- The charge of an expired lease taken over goes, as on release.
give_back(charges_key, use_key, task)

if user ~= '' then
  local g = tonumber(redis.call('HGET', use_key, 'g:' .. user) or '0')
  local r = tonumber(redis.call('HGET', use_key, 'r:' .. user) or '0')
  if (max_gpus >= 0 and g + gpus > max_gpus) or (max_runs >= 0 and r + 1 > max_runs) then
    return {-2, tostring(g), tostring(r)}
  end
  redis.call('HINCRBY', use_key, 'g:' .. user, gpus)
  redis.call('HINCRBY', use_key, 'r:' .. user, 1)
  redis.call('HSET', charges_key, task, user .. '|' .. gpus)
end

-- INCR's reply is a Lua number; GET reads the counter back exactly.
redis.call('INCR', fence_key)
local fence = redis.call('GET', fence_key)
local expires = now + ttl
redis.call('HSET', leases_key, task, fence .. ':' .. worker)
redis.call('ZADD', expiry_key, string.format('%.0f', expires), task)
return {1, fence, expires}

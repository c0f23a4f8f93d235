-- ensure_fence: raise the fencing counter to at least min; never lower it.
--
-- KEYS[1] fence counter (string)
-- ARGV[1] min (canonical decimal, at most 2^63-1: INCR works on int64)
-- Returns 1 raised, 0 already at or above min.
local fence_key = KEYS[1]
local min = ARGV[1]

-- a > b for canonical decimal strings, exact at any size.
local function greater(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end

local cur = redis.call('GET', fence_key)
if cur and not greater(min, cur) then
  return 0
end
redis.call('SET', fence_key, min)
return 1

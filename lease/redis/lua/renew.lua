-- renew: extend every listed lease that is live and carries the given token,
-- to now + ttl. An expired lease belongs to the reaper and is not renewed.
--
-- KEYS[1] leases (hash: task -> "fence:worker"),
-- KEYS[2] lease expiry (zset: task -> expiry, ms on the Redis clock)
-- ARGV[1] ttl in ms (> 0), then pairs ARGV[2k], ARGV[2k+1]: task ID, fence (decimal)
-- Returns one integer per pair, in order: 1 renewed, 0 lost (no lease,
-- another token, or expired: core.ErrLeaseLost).
local leases_key, expiry_key = KEYS[1], KEYS[2]
local ttl = tonumber(ARGV[1])

-- KEYS[3], when given, is the ready marker: without it the leases may have
-- vanished with the whole state, not expired. Returns {-1} (lease.ErrReset).
if KEYS[3] and redis.call('EXISTS', KEYS[3]) == 0 then
  return {-1}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires = string.format('%.0f', now + ttl)

local out = {}
for i = 2, #ARGV, 2 do
  local task, want = ARGV[i], ARGV[i + 1] .. ':'
  local ok = 0
  local exp = redis.call('ZSCORE', expiry_key, task)
  if exp and tonumber(exp) > now then
    local holder = redis.call('HGET', leases_key, task)
    if holder and string.sub(holder, 1, #want) == want then
      redis.call('ZADD', expiry_key, expires, task)
      ok = 1
    end
  end
  out[#out + 1] = ok
end
return out

-- reap: remove and return up to limit leases that expired by now, earliest
-- expiry first. Removal and return are one step, so each expired lease goes
-- to exactly one caller however many masters reap. The expiry zset yields
-- them without looking at live leases.
--
-- KEYS[1] leases (hash: task -> "fence:worker"),
-- KEYS[2] lease expiry (zset: task -> expiry, ms on the Redis clock),
-- KEYS[3] quota charges (hash: task -> "user|gpus"), dropped with the lease,
-- KEYS[4] quota use (hash: "g:<user>" / "r:<user>" -> charged)
-- ARGV[1] most leases to return (> 0)
-- Returns a flat array, four entries per reaped lease:
--         task ID, fence (decimal), worker ID, expiry in ms.
local leases_key, expiry_key, charges_key, use_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local limit = tonumber(ARGV[1])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- A lease is expired from its expiry on (expiry <= now): the bound is inclusive.
local expired = redis.call('ZRANGEBYSCORE', expiry_key, '-inf', string.format('%.0f', now),
  'WITHSCORES', 'LIMIT', 0, limit)
local out = {}
for i = 1, #expired, 2 do
  local task, exp = expired[i], expired[i + 1]
  local holder = redis.call('HGET', leases_key, task)
  redis.call('ZREM', expiry_key, task)
  redis.call('HDEL', leases_key, task)
  give_back(charges_key, use_key, task)
  if holder then
    local sep = string.find(holder, ':', 1, true)
    out[#out + 1] = task
    out[#out + 1] = string.sub(holder, 1, sep - 1)
    out[#out + 1] = string.sub(holder, sep + 1)
    out[#out + 1] = exp
  end
end
return out

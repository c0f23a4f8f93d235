-- touch: mark a worker present until now + ttl, attached to a master, and
-- drop a bounded number of presences that expired (workers that vanished
-- without forget), so the index does not grow without end.
--
-- KEYS[1] presence (zset: worker -> expiry, ms on the Redis clock),
-- KEYS[2] presence masters (hash: worker -> master ID)
-- ARGV[1] worker ID, ARGV[2] master ID, ARGV[3] ttl in ms (> 0),
-- ARGV[4] most expired presences to drop
-- Returns the number of expired presences dropped.
local presence_key, masters_key = KEYS[1], KEYS[2]
local worker, master, ttl, prune = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local gone = redis.call('ZRANGEBYSCORE', presence_key, '-inf', string.format('%.0f', now), 'LIMIT', 0, prune)
for _, w in ipairs(gone) do
  redis.call('ZREM', presence_key, w)
  redis.call('HDEL', masters_key, w)
end
redis.call('ZADD', presence_key, string.format('%.0f', now + ttl), worker)
redis.call('HSET', masters_key, worker, master)
return #gone

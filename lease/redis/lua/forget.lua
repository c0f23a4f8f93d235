-- forget: remove a worker's presence at once (a clean disconnect).
--
-- KEYS[1] presence (zset: worker -> expiry, ms on the Redis clock),
-- KEYS[2] presence masters (hash: worker -> master ID)
-- ARGV[1] worker ID
-- Returns 1 removed, 0 was absent.
local presence_key, masters_key = KEYS[1], KEYS[2]
local worker = ARGV[1]

redis.call('HDEL', masters_key, worker)
return redis.call('ZREM', presence_key, worker)

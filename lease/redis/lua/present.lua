-- present: whether a worker's presence is live, and the master it is
-- attached to. Read-only.
--
-- KEYS[1] presence (zset: worker -> expiry, ms on the Redis clock),
-- KEYS[2] presence masters (hash: worker -> master ID)
-- ARGV[1] worker ID
-- Returns {1, master ID} present, {0} absent or expired.
local presence_key, masters_key = KEYS[1], KEYS[2]
local worker = ARGV[1]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local exp = redis.call('ZSCORE', presence_key, worker)
if not exp or tonumber(exp) <= now then
  return {0}
end
return {1, redis.call('HGET', masters_key, worker) or ''}

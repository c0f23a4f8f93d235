-- charge: record `count` more events of a subject already admitted (a
-- sweep's members beyond the one admission the sweep took), on the Redis
-- clock, never past `limit` events in the window: the log stays bounded and
-- the next admission waits for the oldest to leave.
--
-- KEYS[1] the subject's log (as ratelimit.lua), ARGV[1] window in ms,
-- ARGV[2] limit, ARGV[3] count, ARGV[4] a member prefix unique to this call
-- Returns the events recorded.
local log_key = KEYS[1]
local window, limit, count, prefix = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

redis.call('ZREMRANGEBYSCORE', log_key, '-inf', now - window)
local n = redis.call('ZCARD', log_key)
local add = math.min(count, limit - n)
for i = 1, add do
  redis.call('ZADD', log_key, now, prefix .. ':' .. i)
end
if add > 0 then
  redis.call('PEXPIRE', log_key, window)
end
return math.max(add, 0)

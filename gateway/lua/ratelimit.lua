-- ratelimit: a sliding-window log. Admit one event unless `limit` events were
-- admitted within the last `window` ms, on the Redis clock (so gateways with
-- skewed clocks share one timeline).
--
-- KEYS[1] the subject's log (zset: member -> admission time, ms)
-- ARGV[1] window in ms (> 0), ARGV[2] limit (> 0), ARGV[3] a member unique to
-- this call
-- Returns {1, remaining, 0}: admitted; remaining admissions left now.
--         {0, 0, retry_ms}: refused; the oldest admission leaves the window
--         in retry_ms.
local log_key = KEYS[1]
local window, limit, member = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

redis.call('ZREMRANGEBYSCORE', log_key, '-inf', now - window)
local n = redis.call('ZCARD', log_key)
if n < limit then
  redis.call('ZADD', log_key, now, member)
  redis.call('PEXPIRE', log_key, window)
  return {1, limit - n - 1, 0}
end
local oldest = redis.call('ZRANGE', log_key, 0, 0, 'WITHSCORES')
local retry = window
if oldest[2] then
  retry = tonumber(oldest[2]) + window - now
end
if retry < 1 then
  retry = 1
end
return {0, 0, retry}

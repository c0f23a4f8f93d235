-- give_back: the quota give-back that claim.lua (an expired lease taken
-- over), release.lua and reap.lua share. scripts.go prepends this file to
-- each of them: Redis runs a script as one chunk and has no require.
--
-- give_back(charges_key, use_key, task) drops task's charge, if it has one,
-- from charges_key (hash: task -> "user|gpus") and takes one run and its GPUs
-- off the owner's counts in use_key (hash: "g:<user>" / "r:<user>" ->
-- charged); the owner's last run takes both fields with it.
local function give_back(charges_key, use_key, task)
  local old = redis.call('HGET', charges_key, task)
  if not old then
    return
  end
  local sep = string.find(old, '|', 1, true)
  local u, g = string.sub(old, 1, sep - 1), tonumber(string.sub(old, sep + 1))
  if redis.call('HINCRBY', use_key, 'r:' .. u, -1) <= 0 then
    redis.call('HDEL', use_key, 'r:' .. u, 'g:' .. u)
  else
    -- -0 (a CPU run's) reaches Redis as "-0", which HINCRBY refuses.
    if g ~= 0 then redis.call('HINCRBY', use_key, 'g:' .. u, -g) end
  end
  redis.call('HDEL', charges_key, task)
end


-- Renews a concurrency lease (lua/concurrency.lua) on the key's node: KEYS[1] the lease
-- set, ARGV[1] the lease's member, ARGV[2] the lease lifetime in ms. A lease that is
-- already gone (the store lost it) is not taken again: that could go past the limit.
local t = redis.call('TIME')
local now = t[1] * 1000 + t[2] / 1000
if redis.call('ZADD', KEYS[1], 'XX', 'CH', now + ARGV[2], ARGV[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0

-- concurrency: a = limit, b = lease lifetime ms. A ZSET of leases (member = lease,
-- score = its expiry): released by ZREM when the response finishes, reclaimed here
-- once expired if a gateway died holding it.
ALGOS.cc = function(key, clock, limit, lifetime, _, _, commit, member)
  local now = clock()
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local n = redis.call('ZCARD', key)
  if n + 1 > limit then
    return {0, limit, 0, 0, 1000}
  end
  if commit then
    redis.call('ZADD', key, now + lifetime, member())
    redis.call('PEXPIRE', key, ceil(lifetime))
  end
  return {1, limit, limit - n - 1, 0, 0}
end

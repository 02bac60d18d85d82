-- sliding_log: a = limit, b = window ms. A ZSET of admitted requests scored by Redis
-- time; members are unique (request nonce + index), so requests in the same
-- millisecond all count. Denied requests are not recorded.
ALGOS.sl = function(key, clock, limit, window, _, cost, commit, member)
  local now = clock()
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  local n = redis.call('ZCARD', key)
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  local reset = window
  if oldest[2] then reset = tonumber(oldest[2]) + window - now end
  if n + cost > limit then
    local k = n + cost - limit
    local retry = window
    if k <= n then
      local e = redis.call('ZRANGE', key, k - 1, k - 1, 'WITHSCORES')
      retry = tonumber(e[2]) + window - now
    end
    return {0, limit, math.max(0, limit - n), ceil(reset), ceil(retry)}
  end
  if commit then
    for i = 1, cost do
      redis.call('ZADD', key, now, member() .. ':' .. i)
    end
    redis.call('PEXPIRE', key, ceil(window))
  end
  return {1, limit, limit - n - cost, ceil(reset), 0}
end

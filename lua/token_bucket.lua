-- token_bucket: a = rate count, b = rate period ms, c = burst. One HASH (t = tokens,
-- s = time of the last refill); refilled from Redis time, never above burst.
ALGOS.tb = function(key, clock, count, per, burst, cost, commit)
  local now = clock()
  local rate = count / per
  local h = redis.call('HMGET', key, 't', 's')
  local tokens = burst
  if h[1] then tokens = math.min(burst, tonumber(h[1]) + (now - tonumber(h[2])) * rate) end
  if tokens + 1e-9 < cost then
    return {0, burst, floor(tokens), ceil((burst - tokens) / rate), math.max(1, ceil((cost - tokens) / rate))}
  end
  tokens = tokens - cost
  local reset = ceil((burst - tokens) / rate)
  if commit then
    redis.call('HSET', key, 't', string.format('%.6f', tokens), 's', string.format('%.3f', now))
    redis.call('PEXPIRE', key, reset + 1)
  end
  return {1, burst, floor(tokens), reset, 0}
end

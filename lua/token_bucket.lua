-- token_bucket: a = rate count, b = rate period ms, c = burst. One HASH (t = tokens,
-- s = time of the last refill); refilled from Redis time, never above burst.
ALGOS.tb = function() return {
  load = function(key)
    local h = redis.call('HMGET', key, 't', 's')
    return {t = tonumber(h[1]), s = tonumber(h[2])}
  end,
  step = function(st, spec, cost, commit)
    local t, burst = clock(), spec[4]
    local rate = spec[2] / spec[3]
    local tokens = burst
    if st.t then tokens = math.min(burst, st.t + (t - st.s) * rate) end
    if tokens + 1e-9 < cost then
      return 0, floor(tokens), ceil((burst - tokens) / rate), math.max(1, ceil((cost - tokens) / rate))
    end
    tokens = tokens - cost
    if commit then
      st.t, st.s, st.dirty = tokens, t, true
    end
    return 1, floor(tokens), ceil((burst - tokens) / rate), 0
  end,
  save = function(key, st, spec)
    local rate = spec[2] / spec[3]
    redis.call('HSET', key, 't', string.format('%.6f', st.t), 's', string.format('%.3f', st.s))
    redis.call('PEXPIRE', key, ceil((spec[4] - st.t) / rate) + 1)
  end,
} end

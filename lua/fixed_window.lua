-- fixed_window: a = limit, b = window ms. One counter that starts with the first
-- admitted request and expires `window` later (SET ... PX on creation, INCRBY after).
ALGOS.fw = function(key, clock, limit, window, _, cost, commit)
  local ttl = redis.call('PTTL', key)
  local used = 0
  if ttl > 0 then used = tonumber(redis.call('GET', key) or '0') else ttl = window end
  if used + cost > limit then
    return {0, limit, math.max(0, limit - used), ttl, ttl}
  end
  if commit then
    if used == 0 then
      redis.call('SET', key, cost, 'PX', ttl)
    else
      redis.call('INCRBY', key, cost)
    end
  end
  return {1, limit, limit - used - cost, ttl, 0}
end

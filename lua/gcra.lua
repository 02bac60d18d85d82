-- gcra: a = rate count, b = rate period ms, c = burst. One key holding the
-- theoretical arrival time (TAT); a request is admitted when it is no earlier than
-- TAT + cost*T - burst*T, T being the emission interval.
ALGOS.gcra = function() return {
  load = function(key)
    return {tat = tonumber(redis.call('GET', key) or '0')}
  end,
  step = function(st, spec, cost, commit)
    local now_ms = clock()
    local t = spec[3] / spec[2]
    local tolerance = t * spec[4]
    local tat = math.max(st.tat, now_ms)
    local new_tat = tat + t * cost
    local allow_at = new_tat - tolerance
    if now_ms + 1e-9 < allow_at then
      return 0, math.max(0, floor((now_ms - (tat - tolerance)) / t)), ceil(tat - now_ms),
             math.max(1, ceil(allow_at - now_ms))
    end
    if commit then
      st.tat, st.dirty = new_tat, true
    end
    return 1, math.max(0, floor((now_ms - (new_tat - tolerance)) / t)), ceil(new_tat - now_ms), 0
  end,
  save = function(key, st)
    redis.call('SET', key, string.format('%.3f', st.tat), 'PX', ceil(st.tat - clock()) + 1)
  end,
} end

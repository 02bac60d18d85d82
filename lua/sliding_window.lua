-- sliding_window: a = limit, b = window ms. Two buckets in one HASH (b = index of
-- the current bucket, c = its count, p = the previous bucket's count); the previous
-- bucket is weighted by how much of it the sliding window still covers.
ALGOS.sw = function() return {
  load = function(key)
    local h = redis.call('HMGET', key, 'b', 'c', 'p')
    return {b = tonumber(h[1]), c = tonumber(h[2]) or 0, p = tonumber(h[3]) or 0}
  end,
  step = function(st, spec, cost, commit)
    local limit, window = spec[2], spec[3]
    local t = math.floor(clock())
    local idx = math.floor(t / window)
    local elapsed = t - idx * window
    local curr, prev = 0, 0
    if st.b == idx then
      curr, prev = st.c, st.p
    elseif st.b == idx - 1 then
      prev = st.c
    end
    local estimate = prev * (window - elapsed) / window + curr
    if estimate + cost > limit + 1e-9 then
      local room = limit - curr - cost
      local retry = window - elapsed
      if prev > 0 and room >= 0 then
        retry = math.max(1, ceil(window - room * window / prev - elapsed))
      end
      return 0, math.max(0, floor(limit - estimate)), window - elapsed, retry
    end
    if commit then
      st.b, st.c, st.p, st.dirty = idx, curr + cost, prev, true
    end
    return 1, math.max(0, floor(limit - estimate - cost)), window - elapsed, 0
  end,
  save = function(key, st, spec)
    redis.call('HSET', key, 'b', st.b, 'c', st.c, 'p', st.p)
    redis.call('PEXPIRE', key, (st.b + 2) * spec[3] - math.floor(clock()))
  end,
} end

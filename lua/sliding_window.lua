-- sliding_window: a = limit, b = window ms. Two buckets: b = index of the current
-- bucket, c = its count, p = the previous bucket's count; the previous bucket is
-- weighted by how much of it the sliding window still covers.
ALGOS[SW] = function(now, ceil, floor, whole, read_state)
  local mfloor, mmax = math.floor, math.max
  return {
    load = function(key, spec)
      local b, c, p = read_state(key, '<ddd')
      return {b = b, c = c or 0, p = p or 0, dirty = false, spec = spec}
    end,
    take = function(st, spec, cost, count, commit)
      local limit, window = spec[2], spec[3]
      local t = mfloor(now)
      local idx = mfloor(t / window)
      local elapsed = t - idx * window
      local curr, prev = 0, 0
      if st.b == idx then
        curr, prev = st.c, st.p
      elseif st.b == idx - 1 then
        prev = st.c
      end
      local weighted = prev * (window - elapsed) / window
      local estimate = weighted + curr
      if estimate + cost > limit + 1e-9 then
        local room = limit - curr - cost
        local retry = window - elapsed
        if prev > 0 and room >= 0 then
          retry = mmax(1, ceil(window - room * window / prev - elapsed))
        end
        return count, 0, mmax(0, floor(limit - estimate)), window - elapsed, retry, 0, 0
      end
      -- Admitted while the estimate with this request's cost stays within the limit.
      local k = 1
      while k < count and weighted + (curr + k * cost) + cost <= limit + 1e-9 do k = k + 1 end
      if commit then
        st.b, st.c, st.p, st.dirty = idx, curr + k * cost, prev, true
      end
      return k, 1, mmax(0, floor(limit - estimate - cost)), window - elapsed, 0, -cost, 0
    end,
    save = function(key, st, spec)
      redis.call('SET', key, struct.pack('<ddd', st.b, st.c, st.p), 'PX', (st.b + 2) * spec[3] - mfloor(now))
    end,
  }
end

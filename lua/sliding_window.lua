-- sliding_window: a = limit, b = window ms. Two buckets: b = index of the current
-- bucket, c = its count, p = the previous bucket's count; the previous bucket is
-- weighted by how much of it the sliding window still covers. o = where bucket 0
-- starts: the key's first request (as the memory store does, src/limit/algorithms.cpp),
-- not the clock's window, where a flood from idle got a whole limit at once.
ALGOS[SW] = function(now, ceil, floor, whole, read_state)
  local mfloor, mmax = math.floor, math.max
  return {
    load = function(key, spec)
      local v = redis.call('GET', key)
      local b, c, p, o
      if v and #v == 32 then b, c, p, o = struct.unpack('<dddd', v)
      -- (three numbers: written before o, on buckets from the clock's 0, which o = 0 keeps)
      elseif v and #v == 24 then b, c, p = struct.unpack('<ddd', v) o = 0 end
      return {b = b, c = c or 0, p = p or 0, o = o, dirty = false, spec = spec}
    end,
    take = function(st, spec, cost, count, commit)
      local limit, window = spec[2], spec[3]
      local origin = st.o or mfloor(now)
      local t = mfloor(now) - origin
      -- A clock behind the bucket last written (this node's wall clock stepped back)
      -- counts in that bucket, as at its start, not as an earlier one without a count.
      if st.b and t < st.b * window then t = st.b * window end
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
        st.b, st.c, st.p, st.o, st.dirty = idx, curr + k * cost, prev, origin, true
      end
      return k, 1, mmax(0, floor(limit - estimate - cost)), window - elapsed, 0, -cost, 0
    end,
    give = function(st, spec, cost)
      -- Gone: a refund has nothing to give back; a charge (cost < 0) begins the key now.
      if not st.b and cost >= 0 then return end
      local window = spec[3]
      if not st.b then st.b, st.c, st.p, st.o = 0, 0, 0, mfloor(now) end
      -- A charge goes into the bucket of now (as take counts), the stored one moved on if
      -- it is past; a refund (or a grant) into the stored one, where what it gives back was
      -- counted.
      if cost < 0 then
        local t = mmax(mfloor(now) - st.o, st.b * window)
        local idx = mfloor(t / window)
        if idx == st.b + 1 then
          st.p, st.c = st.c, 0
        elseif idx > st.b + 1 then
          st.p, st.c = 0, 0
        end
        st.b = idx
      end
      st.c, st.dirty = mmax(0, st.c - cost), true
    end,
    save = function(key, st, spec)
      redis.call('SET', key, struct.pack('<dddd', st.b, st.c, st.p, st.o), 'PX', mmax(1, st.o + (st.b + 2) * spec[3] - mfloor(now)))
    end,
  }
end

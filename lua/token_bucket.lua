-- token_bucket: a = rate count, b = rate period ms, c = burst. State: tokens t and the
-- Redis time s of the last refill; refilled from Redis time, never above burst, a token
-- per emission interval T: a request is judged at the start of its interval, `lag` ms
-- before now, as the memory store does (see src/limit/algorithms.cpp), and s is always
-- such a start, so the intervals between two are counted whole.
ALGOS[TB] = function(now, ceil, floor, whole, read_state)
  local mmin, mmax, mfloor, mfmod = math.min, math.max, math.floor, math.fmod
  return {
    load = function(key, spec)
      local t, s = read_state(key, '<dd')
      return {t = t, s = s, dirty = false, spec = spec}
    end,
    take = function(st, spec, cost, count, commit)
      local burst = spec[4]
      local t = spec[3] / spec[2]
      local lag = mfmod(now, t)
      local start = now - lag
      local tokens = burst
      if st.t then tokens = mmin(burst, st.t + mfloor((start - st.s) / t + 0.5)) end
      if tokens + 1e-9 < cost then
        return count, 0, floor(tokens), mmax(0, ceil((burst - tokens) * t - lag)),
          mmax(1, ceil((cost - tokens) * t - lag)), 0, 0
      end
      -- Admitted while tokens last; their resets are evenly spaced only if a cost's
      -- worth of tokens takes whole ms to come back, else one at a time.
      local step, k, left = whole(cost * spec[3] / spec[2]), 1, tokens - cost
      if step then
        while k < count and left + 1e-9 >= cost do k, left = k + 1, left - cost end
      end
      if commit then
        st.t, st.s, st.dirty = left, start, true
      end
      return k, 1, floor(tokens - cost), mmax(0, ceil((burst - tokens + cost) * t - lag)), 0, -cost, step or 0
    end,
    save = function(key, st, spec)
      local rate = spec[2] / spec[3]
      redis.call('SET', key, struct.pack('<dd', st.t, st.s), 'PX', ceil((spec[4] - st.t) / rate) + 1)
    end,
  }
end

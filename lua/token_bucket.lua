-- token_bucket: a = rate count, b = rate period ms, c = burst. State: tokens t and the
-- Redis time s of the last refill; refilled from Redis time, never above burst.
ALGOS[TB] = function(now, ceil, floor, whole, read_state)
  local mmin, mmax = math.min, math.max
  return {
    load = function(key, spec)
      local t, s = read_state(key, '<dd')
      return {t = t, s = s, dirty = false, spec = spec}
    end,
    take = function(st, spec, cost, count, commit)
      local burst = spec[4]
      local rate = spec[2] / spec[3]
      local tokens = burst
      if st.t then tokens = mmin(burst, st.t + (now - st.s) * rate) end
      if tokens + 1e-9 < cost then
        return count, 0, floor(tokens), ceil((burst - tokens) / rate), mmax(1, ceil((cost - tokens) / rate)), 0, 0
      end
      -- Admitted while tokens last; their resets are evenly spaced only if a cost's
      -- worth of tokens takes whole ms to come back, else one at a time.
      local step, k, left = whole(cost * spec[3] / spec[2]), 1, tokens - cost
      if step then
        while k < count and left + 1e-9 >= cost do k, left = k + 1, left - cost end
      end
      if commit then
        st.t, st.s, st.dirty = left, now, true
      end
      return k, 1, floor(tokens - cost), ceil((burst - tokens + cost) / rate), 0, -cost, step or 0
    end,
    save = function(key, st, spec)
      local rate = spec[2] / spec[3]
      redis.call('SET', key, struct.pack('<dd', st.t, st.s), 'PX', ceil((spec[4] - st.t) / rate) + 1)
    end,
  }
end

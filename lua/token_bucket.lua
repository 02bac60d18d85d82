-- token_bucket: a = rate count, b = rate period ms, c = burst. State: tokens t and the
-- Redis time s of the last refill; refilled from Redis time, never above burst. A bucket
-- full for less than min(T, 2 ms) (T = 1/rate) counts its refill from when it became
-- full, as in the memory store (src/limit/algorithms.cpp): a request's lateness behind a
-- round trip does not cost the limit a token.
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
      local tokens, stamp = burst, now
      if st.t then
        local raw = st.t + (now - st.s) * rate
        tokens = mmin(burst, raw)
        local full_for = (raw - burst) / rate
        if full_for > 0 and full_for < 1 / rate - 1e-9 and full_for <= 2 + 1e-9 then stamp = now - full_for end
      end
      if tokens + 1e-9 < cost then
        local wait = (cost - tokens) / rate
        -- on_exceed: delay (spec[7], max_delay ms): the tokens taken ahead (below zero),
        -- the request to go once they have come; one at a time.
        if spec[7] > 0 and wait <= spec[7] + 1e-9 then
          if commit then st.t, st.s, st.dirty = tokens - cost, stamp, true end
          return 1, 1, 0, ceil((burst - tokens + cost) / rate), ceil(wait), 0, 0
        end
        return count, 0, floor(tokens), ceil((burst - tokens) / rate), mmax(1, ceil(wait)), 0, 0
      end
      -- Admitted while tokens last; their resets are evenly spaced only if a cost's
      -- worth of tokens takes whole ms to come back, else one at a time.
      local step, k, left = whole(cost * spec[3] / spec[2]), 1, tokens - cost
      if step then
        while k < count and left + 1e-9 >= cost do k, left = k + 1, left - cost end
      end
      if commit then
        st.t, st.s, st.dirty = left, stamp, true
      end
      return k, 1, floor(tokens - cost), ceil((burst - tokens + cost) / rate), 0, -cost, step or 0
    end,
    give = function(st, spec, cost)
      -- Gone (full again): a refund has nothing to give back; a charge (cost < 0) takes
      -- from a full bucket. The tokens are brought up to now first: the TTL counts from it.
      if not st.t and cost >= 0 then return end
      local burst, rate = spec[4], spec[2] / spec[3]
      local tokens = burst
      if st.t then tokens = mmin(burst, st.t + (now - st.s) * rate) end
      st.t, st.s, st.dirty = mmin(burst, tokens + cost), now, true
    end,
    save = function(key, st, spec)
      local rate = spec[2] / spec[3]
      redis.call('SET', key, struct.pack('<dd', st.t, st.s), 'PX', ceil((spec[4] - st.t) / rate) + 3)
    end,
  }
end

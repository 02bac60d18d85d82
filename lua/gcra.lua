-- gcra: a = rate count, b = rate period ms, c = burst. State: the theoretical arrival
-- time (TAT) as whole ms o and the rest r; a request is admitted when it is no earlier
-- than TAT + cost*T - burst*T, T being the emission interval. Times are worked out
-- relative to now: absolute ones are near 1.7e12 ms, where doubles are 0.25 us apart,
-- and TAT + T + T ... would drift enough to refuse a request that fits. A request late
-- for its turn by less than min(T, 2 ms) keeps that turn's time, as in the memory store
-- (src/limit/algorithms.cpp): a round trip's lateness does not push the limit's clock back.
ALGOS[GCRA] = function(now, ceil, floor, whole, read_state)
  local mfloor, mmax = math.floor, math.max
  local origin = mfloor(now)
  local frac = now - origin
  return {
    load = function(key, spec)
      local o, r = read_state(key, '<dd')
      return {o = o, r = r, dirty = false, spec = spec}
    end,
    take = function(st, spec, cost, count, commit)
      local t = spec[3] / spec[2]
      local tolerance = t * spec[4]
      local tat = 0
      if st.o then
        tat = st.o - origin + st.r - frac
        if tat < 0 and (-tat >= t - 1e-9 or -tat > 2 + 1e-9) then tat = 0 end
      end
      local new_tat = tat + t * cost
      local wait = new_tat - tolerance
      if wait > 1e-9 then
        -- on_exceed: delay (spec[7], max_delay ms): admitted now, to go after its wait
        -- (retry_ms of an admission); one at a time, each later than the one before.
        if spec[7] > 0 and wait <= spec[7] + 1e-9 then
          if commit then st.o, st.r, st.dirty = origin, new_tat + frac, true end
          return 1, 1, 0, ceil(new_tat), ceil(wait), 0, 0
        end
        return count, 0, mmax(0, floor((tolerance - tat) / t)), ceil(mmax(tat, 0)), mmax(1, ceil(wait)), 0, 0
      end
      -- Admitted while each is no earlier than its allowed time; their resets are evenly
      -- spaced only if cost*T is whole ms, else one at a time.
      local step, k, last = whole(cost * spec[3] / spec[2]), 1, new_tat
      if step then
        while k < count and last + t * cost - tolerance <= 1e-9 do k, last = k + 1, last + t * cost end
      end
      if commit then
        st.o, st.r, st.dirty = origin, last + frac, true
      end
      return k, 1, mmax(0, floor((tolerance - new_tat) / t)), ceil(new_tat), 0, -cost, step or 0
    end,
    give = function(st, spec, cost, _, _, key)
      -- Gone: a refund has nothing to give back; a charge (cost < 0) starts from now.
      if not st.o and cost >= 0 then return end
      -- The TAT goes back by cost*T (forward, a charge: from now at the earliest); at or
      -- before now, the key is as if never used.
      local tat = st.o and (st.o - origin + st.r - frac) or 0
      if cost < 0 then tat = mmax(0, tat) end
      tat = tat - spec[3] / spec[2] * cost
      if tat <= 0 then
        redis.call('DEL', key)
        return
      end
      st.o, st.r, st.dirty = origin, tat + frac, true
    end,
    save = function(key, st)
      redis.call('SET', key, struct.pack('<dd', st.o, st.r), 'PX', ceil(st.r - frac) + 3)
    end,
  }
end

-- gcra: a = rate count, b = rate period ms, c = burst. State: the theoretical arrival
-- time (TAT) as whole ms o and the rest r; a request is admitted when it is no earlier
-- than TAT + cost*T - burst*T, T being the emission interval. Times are worked out
-- relative to now: absolute ones are near 1.7e12 ms, where doubles are 0.25 us apart,
-- and TAT + T + T ... would drift enough to refuse a request that fits. A request is
-- judged at the start of its emission interval, `lag` ms before now (fmod is exact), as
-- the memory store does (see src/limit/algorithms.cpp): one late within its interval,
-- behind a round trip, still gets that interval's turn.
ALGOS[GCRA] = function(now, ceil, floor, whole, read_state)
  local mfloor, mmax, mfmod = math.floor, math.max, math.fmod
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
      local lag = mfmod(now, t)
      local tat = 0
      if st.o then tat = mmax(st.o - origin + st.r - frac + lag, 0) end
      local new_tat = tat + t * cost
      if new_tat - tolerance > 1e-9 then
        return count, 0, mmax(0, floor((tolerance - tat) / t)), mmax(0, ceil(tat - lag)),
          mmax(1, ceil(new_tat - tolerance - lag)), 0, 0
      end
      -- Admitted while each is no earlier than its allowed time; their resets are evenly
      -- spaced only if cost*T is whole ms, else one at a time.
      local step, k, last = whole(cost * spec[3] / spec[2]), 1, new_tat
      if step then
        while k < count and last + t * cost - tolerance <= 1e-9 do k, last = k + 1, last + t * cost end
      end
      if commit then
        st.o, st.r, st.dirty = origin, last - lag + frac, true
      end
      return k, 1, mmax(0, floor((tolerance - new_tat) / t)), mmax(0, ceil(new_tat - lag)), 0, -cost, step or 0
    end,
    save = function(key, st)
      redis.call('SET', key, struct.pack('<dd', st.o, st.r), 'PX', ceil(st.r - frac) + 1)
    end,
  }
end

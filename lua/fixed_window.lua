-- fixed_window: a = limit, b = window ms. State: admitted cost n and the Redis time (ms)
-- e the window ends; the window starts with the first admitted request, and the key
-- expires (PXAT) when it ends. A calendar window (align: calendar; c > 0): c is the end
-- of the calendar period the gateway's clock is in and b the end of the one after (epoch
-- ms; the gateway knows the time zones): a new window ends at c, or at b once Redis' own
-- clock is past c.
ALGOS[FW] = function(now, ceil, floor, whole, read_state)
  local mfloor, mmin, mmax = math.floor, math.min, math.max
  local function window_end(spec)
    local c = spec[4]
    if c > 0 then
      if now < c then return c end
      return spec[3]
    end
    return now + spec[3]
  end
  return {
    load = function(key, spec)
      local n, e = read_state(key, '<dd')
      if e and e > now then
        return {n = n, e = e, reset = ceil(e - now), fresh = false, dirty = false, spec = spec}
      end
      return {n = 0, e = nil, reset = nil, fresh = true, dirty = false, spec = spec}
    end,
    take = function(st, spec, cost, count, commit)
      local limit, used = spec[2], st.n
      -- Time stands still within a call: an existing window's reset was worked out on load.
      local reset = st.reset or (spec[4] > 0 and ceil(window_end(spec) - now)) or spec[3]
      local fit = mfloor((limit - used) / cost)
      if fit < 1 then
        return count, 0, mmax(0, limit - used), reset, reset, 0, 0
      end
      local k = mmin(count, fit)
      if commit then
        if not st.e then st.e = ceil(window_end(spec)) end
        st.n, st.dirty = used + k * cost, true
      end
      return k, 1, limit - used - cost, reset, 0, -cost, 0
    end,
    give = function(st, spec, cost)
      if st.fresh then
        -- Gone: a refund has nothing to give back; a charge (cost < 0) begins a window.
        if cost >= 0 then return end
        st.e = ceil(window_end(spec))
      end
      st.n, st.dirty = mmax(0, st.n - cost), true
    end,
    save = function(key, st)
      local v = struct.pack('<dd', st.n, st.e)
      if st.fresh then
        redis.call('SET', key, v, 'PXAT', st.e)
      else
        redis.call('SET', key, v, 'KEEPTTL')  -- an existing window keeps its end
      end
    end,
  }
end

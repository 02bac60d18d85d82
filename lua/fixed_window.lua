-- fixed_window: a = limit, b = window ms. One HASH: n = admitted cost, e = the Redis
-- time (ms) the window ends. The window starts with the first admitted request; the
-- key expires (PEXPIREAT) when it ends.
ALGOS.fw = function() return {
  load = function(key)
    local h = redis.call('HMGET', key, 'n', 'e')
    local e = tonumber(h[2])
    if e and e > clock() then return {n = tonumber(h[1]) or 0, e = e} end
    return {n = 0, fresh = true}
  end,
  step = function(st, spec, cost, commit)
    local limit, used = spec[2], st.n
    -- Time stands still within a call: the reset is worked out once per key (Lua
    -- calls are dear in Redis, and this runs for every request of the call).
    local reset = st.reset
    if not reset then
      reset = spec[3]
      if st.e then reset = ceil(st.e - clock()) end
      st.reset = reset
    end
    if used + cost > limit then
      return 0, math.max(0, limit - used), reset, reset
    end
    if commit then
      if not st.e then st.e = clock() + spec[3] end
      st.n = used + cost
      st.dirty = true
    end
    return 1, limit - used - cost, reset, 0
  end,
  save = function(key, st)
    if st.fresh then
      local e = ceil(st.e)
      redis.call('HSET', key, 'n', st.n, 'e', e)
      redis.call('PEXPIREAT', key, e)
    else
      redis.call('HSET', key, 'n', st.n)  -- keeps the key's expiry
    end
  end,
} end

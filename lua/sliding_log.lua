-- sliding_log: a = limit, b = window ms. A ZSET of admitted requests scored by Redis
-- time; members are unique (request nonce, limit index, unit of cost), so requests in
-- the same millisecond all count. Denied requests are not recorded.
ALGOS[SL] = function(now, ceil, floor, whole, read_state, zadd_all)
  local mmax = math.max
  return {
    members = true,
    load = function(key, spec, dry)
      -- gone: the expired entries still there (a dry run leaves them), read past.
      local gone = 0
      if dry then gone = redis.call('ZCOUNT', key, '-inf', now - spec[3])
      else redis.call('ZREMRANGEBYSCORE', key, '-inf', now - spec[3]) end
      local oldest = redis.call('ZRANGE', key, gone, gone, 'WITHSCORES')
      return {n = redis.call('ZCARD', key) - gone, oldest = tonumber(oldest[2]), add = {}, key = key, gone = gone,
              dirty = false, spec = spec}
    end,
    take = function(st, spec, cost, _, commit, nonce, i)
      local limit, window = spec[2], spec[3]
      local n = st.n + #st.add
      local reset = window
      if st.oldest then reset = ceil(st.oldest + window - now) end
      if n + cost > limit then
        -- The k-th oldest entry must leave before `cost` more fit (this call's own
        -- entries are the newest, at time now).
        local k = n + cost - limit
        local retry = window
        if k <= st.n then
          local e = redis.call('ZRANGE', st.key, st.gone + k - 1, st.gone + k - 1, 'WITHSCORES')
          retry = ceil(tonumber(e[2]) + window - now)
        end
        return 1, 0, mmax(0, limit - n), reset, retry, 0, 0
      end
      if commit then
        local m = nonce .. ':' .. i .. ':'
        for u = 1, cost do st.add[#st.add + 1] = m .. u end
        if not st.oldest then st.oldest = now end
        st.dirty = true
      end
      return 1, 1, limit - n - cost, reset, 0, 0, 0
    end,
    give = function(_, _, cost, nonce, i, key)
      local m = nonce .. ':' .. i .. ':'
      for u = 1, cost do redis.call('ZREM', key, m .. u) end
    end,
    save = function(key, st, spec)
      zadd_all(key, now, st.add)
      redis.call('PEXPIRE', key, ceil(spec[3]))
    end,
  }
end

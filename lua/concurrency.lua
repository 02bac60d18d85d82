-- concurrency: a = limit, b = lease lifetime ms. A ZSET of leases (member = request
-- nonce and limit index, score = its expiry): released by ZREM when the response
-- finishes, reclaimed here once expired if a gateway died holding it.
ALGOS[CC] = function(now, ceil, floor, whole, read_state, zadd_all)
  return {
    members = true,
    load = function(key, spec, dry)
      -- A dry run leaves the expired leases and counts past them.
      local gone = 0
      if dry then gone = redis.call('ZCOUNT', key, '-inf', now)
      else redis.call('ZREMRANGEBYSCORE', key, '-inf', now) end
      return {n = redis.call('ZCARD', key) - gone, add = {}, dirty = false, spec = spec}
    end,
    take = function(st, spec, _, _, commit, nonce, i)
      local limit = spec[2]
      local n = st.n + #st.add
      if n + 1 > limit then return 1, 0, 0, 0, 1000, 0, 0 end
      if commit then
        st.add[#st.add + 1] = nonce .. ':' .. i
        st.dirty = true
      end
      return 1, 1, limit - n - 1, 0, 0, 0, 0
    end,
    give = function(_, _, _, nonce, i, key)
      redis.call('ZREM', key, nonce .. ':' .. i)
    end,
    save = function(key, st, spec)
      zadd_all(key, now + spec[3], st.add)
      redis.call('PEXPIRE', key, ceil(spec[3]))
    end,
  }
end

-- sliding_window: a = limit, b = window ms. Two buckets in one HASH (b = index of
-- the current bucket, c = its count, p = the previous bucket's count); the previous
-- bucket is weighted by how much of it the sliding window still covers.
ALGOS.sw = function(key, clock, limit, window, _, cost, commit)
  local now = clock()
  local t = math.floor(now)
  local idx = math.floor(t / window)
  local elapsed = t - idx * window
  local h = redis.call('HMGET', key, 'b', 'c', 'p')
  local b = tonumber(h[1])
  local curr, prev = 0, 0
  if b == idx then
    curr = tonumber(h[2]) or 0
    prev = tonumber(h[3]) or 0
  elseif b == idx - 1 then
    prev = tonumber(h[2]) or 0
  end
  local estimate = prev * (window - elapsed) / window + curr
  if estimate + cost > limit + 1e-9 then
    local room = limit - curr - cost
    local retry = window - elapsed
    if prev > 0 and room >= 0 then
      retry = math.max(1, ceil(window - room * window / prev - elapsed))
    end
    return {0, limit, math.max(0, floor(limit - estimate)), window - elapsed, retry}
  end
  if commit then
    redis.call('HSET', key, 'b', idx, 'c', curr + cost, 'p', prev)
    redis.call('PEXPIRE', key, (idx + 2) * window - t)
  end
  return {1, limit, math.max(0, floor(limit - estimate - cost)), window - elapsed, 0}
end

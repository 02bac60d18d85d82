-- gcra: a = rate count, b = rate period ms, c = burst. One key holding the
-- theoretical arrival time (TAT); a request is admitted when it is no earlier than
-- TAT + cost*T - burst*T, T being the emission interval.
ALGOS.gcra = function(key, clock, count, per, burst, cost, commit)
  local now = clock()
  local t = per / count
  local tolerance = t * burst
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  local new_tat = tat + t * cost
  local allow_at = new_tat - tolerance
  if now + 1e-9 < allow_at then
    return {0, burst, math.max(0, floor((now - (tat - tolerance)) / t)), ceil(tat - now),
            math.max(1, ceil(allow_at - now))}
  end
  local reset = ceil(new_tat - now)
  if commit then
    redis.call('SET', key, string.format('%.3f', new_tat), 'PX', reset + 1)
  end
  return {1, burst, math.max(0, floor((now - (new_tat - tolerance)) / t)), reset, 0}
end

-- Driver. The gateway batches the concurrent requests of one event-loop turn into one
-- call. ARGV: [1] the number of requests, [2] the number of limit specs S, [3] the
-- number of request shapes H; then S specs of 6 arguments (algorithm, a, b, c, cost,
-- shadow 1/0); then H shapes, each its number of limits k and k spec indexes
-- (1-based); then per request its shape's index and, if the shape has a sliding_log or
-- concurrency limit, its nonce (members are named after it). KEYS holds the requests'
-- keys in the same order, one per limit.
-- Per request, all limits are checked first; unless one that is not in shadow mode
-- denies, every admitting limit is then recorded: a denied request consumes nothing.
-- Returns one string: per limit, request after request, 4 little-endian 64-bit
-- integers (allowed 1/0, remaining, reset_ms, retry_ms). One string instead of an
-- array of integers spares both sides a reply object per number.
local KEYS, ARGV, tonumber, pack = KEYS, ARGV, tonumber, struct.pack
local specs, shapes, states, touched = {}, {}, {}, {}
local at = 4
for s = 1, tonumber(ARGV[2]) do
  specs[s] = {ALGOS[ARGV[at]], tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]),
              tonumber(ARGV[at + 4]), ARGV[at + 5] == '1'}
  at = at + 6
end
for h = 1, tonumber(ARGV[3]) do
  local k = tonumber(ARGV[at])
  local shape = {k = k, nonce = false}
  for i = 1, k do
    local spec = specs[tonumber(ARGV[at + i])]
    shape[i] = spec
    if spec[1].members then shape.nonce = true end
  end
  shapes[tostring(h)] = shape
  at = at + k + 1
end

local out, key_at = {}, 1
for _ = 1, tonumber(ARGV[1]) do
  local shape = shapes[ARGV[at]]
  local nonce
  if shape.nonce then nonce = ARGV[at + 1]; at = at + 2 else at = at + 1 end
  local k = shape.k
  if k == 1 then
    -- One limit (the common case): a denial records nothing anyway, so one pass.
    local spec, key = shape[1], KEYS[key_at]
    local st = states[key]
    if not st then
      st = spec[1].load(key, spec)
      st.key, st.spec = key, spec
      states[key] = st
      touched[#touched + 1] = st
    end
    out[#out + 1] = pack('<i8i8i8i8', spec[1].step(st, spec, spec[5], true, nonce, 1))
  else
    local results, blocked = {}, false
    for i = 1, k do
      local spec, key = shape[i], KEYS[key_at + i - 1]
      local st = states[key]
      if not st then
        st = spec[1].load(key, spec)
        st.key, st.spec = key, spec
        states[key] = st
        touched[#touched + 1] = st
      end
      local r = {spec[1].step(st, spec, spec[5], false, nonce, i)}
      results[i] = r
      if r[1] == 0 and not spec[6] then blocked = true end
    end
    for i = 1, k do
      local r = results[i]
      if not blocked and r[1] == 1 then
        local spec = shape[i]
        spec[1].step(states[KEYS[key_at + i - 1]], spec, spec[5], true, nonce, i)
      end
      out[#out + 1] = pack('<i8i8i8i8', r[1], r[2], r[3], r[4])
    end
  end
  key_at = key_at + k
end
for i = 1, #touched do
  local st = touched[i]
  if st.dirty then st.spec[1].save(st.key, st, st.spec) end
end
return table.concat(out)

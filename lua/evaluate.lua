-- Driver. The gateway batches the concurrent requests of one event-loop turn into one
-- call. ARGV: [1] the number of entries, [2] the number of limit specs S, [3] the
-- number of request shapes H; then S specs of 6 arguments (algorithm, a, b, c, cost,
-- shadow 1/0); then H shapes, each its number of limits k and k spec indexes
-- (1-based); then per entry its shape's index, its count n of alike requests (same
-- shape, same keys) and, if the shape has a sliding_log or concurrency limit, the
-- request's nonce (members are named after it; such an entry is one request). KEYS
-- holds each entry's keys, one per limit of its shape.
-- The n requests of an entry are decided one after the other, exactly as n entries.
-- Per request, all limits are checked first; unless one that is not in shadow mode
-- denies, every admitting limit is then recorded: a denied request consumes nothing.
-- Returns one string: per limit, request after request, 4 little-endian 64-bit
-- integers (allowed 1/0, remaining, reset_ms, retry_ms). One string instead of an
-- array of integers spares both sides a reply object per number.
local KEYS, ARGV, tonumber = KEYS, ARGV, tonumber
local specs, shapes, states, touched, algos = {}, {}, {}, {}, {}
local at = 4
for s = 1, tonumber(ARGV[2]) do
  local code = ARGV[at]
  local algo = algos[code]
  if not algo then
    algo = ALGOS[code]()
    algos[code] = algo
  end
  specs[s] = {algo, tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]),
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

local function state(key, spec)
  local st = states[key]
  if not st then
    st = spec[1].load(key, spec)
    st.key, st.spec = key, spec
    states[key] = st
    touched[#touched + 1] = st
  end
  return st
end

local out, key_at = {}, 1
for _ = 1, tonumber(ARGV[1]) do
  local shape, count = shapes[ARGV[at]], tonumber(ARGV[at + 1])
  local nonce
  if shape.nonce then
    nonce = ARGV[at + 2]
    at = at + 3
  else
    at = at + 2
  end
  local k = shape.k
  if k == 1 then
    -- One limit (the common case): a denial records nothing anyway, so one pass.
    local spec = shape[1]
    local st, step, cost = state(KEYS[key_at], spec), spec[1].step, spec[5]
    for _ = 1, count do
      local n = #out
      out[n + 1], out[n + 2], out[n + 3], out[n + 4] = step(st, spec, cost, true, nonce, 1)
    end
  else
    local sts = {}
    for i = 1, k do sts[i] = state(KEYS[key_at + i - 1], shape[i]) end
    for _ = 1, count do
      local base, blocked = #out, false
      for i = 1, k do
        local spec, j = shape[i], base + 4 * i
        out[j - 3], out[j - 2], out[j - 1], out[j] = spec[1].step(sts[i], spec, spec[5], false, nonce, i)
        if out[j - 3] == 0 and not spec[6] then blocked = true end
      end
      if not blocked then
        for i = 1, k do
          local spec = shape[i]
          if out[base + 4 * i - 3] == 1 then spec[1].step(sts[i], spec, spec[5], true, nonce, i) end
        end
      end
    end
  end
  key_at = key_at + k
end
for i = 1, #touched do
  local st = touched[i]
  if st.dirty then st.spec[1].save(st.key, st, st.spec) end
end
-- Packed in one C call per 1024 numbers (unpack's stack is bounded).
local parts = {}
for first = 1, #out, 1024 do
  local last = math.min(#out, first + 1023)
  parts[#parts + 1] = struct.pack('<' .. string.rep('i8', last - first + 1), unpack(out, first, last))
end
return table.concat(parts)

-- Driver. The gateway batches the concurrent requests of one event-loop turn into one
-- call. ARGV[1] is one string of little-endian 64-bit integers (read with one
-- struct.unpack, not a tonumber per argument): the number of entries E, of limit specs
-- S and of request shapes H, and flags F (1: a dry run, below); S specs of 6 (algorithm
-- 1-6, a, b, c, cost, shadow 1/0); H shapes, each its number of limits k and k spec indexes (1-based); E entries, each
-- its shape's index and its count n of alike requests (same shape, same keys). ARGV[2]
-- on are the nonces of the entries whose shape has a sliding_log or concurrency limit
-- (members are named after them; such an entry is one request), in entry order. KEYS
-- holds each entry's keys, one per limit of its shape.
-- The n requests of an entry are decided one after the other, exactly as n entries.
-- Per request, all limits are checked first; unless one that is not in shadow mode
-- denies, every admitting limit is then recorded: a denied request consumes nothing.
-- Returns one string of little-endian 64-bit integers: per entry, runs of requests
-- until its n are covered, each run its length and per limit 6 numbers (allowed 1/0,
-- remaining, reset_ms, retry_ms, d_remaining, d_reset): the j-th request of the run
-- (from 0) has remaining + j*d_remaining and reset_ms + j*d_reset. One string instead
-- of an array of integers spares both sides a reply object per number.
-- A dry run (the admin's /limits) answers the same numbers and writes nothing: no
-- record, no cleanup of expired entries, no expiry touched, no key created. Its entries
-- are one request each (a run of alike requests would need the records it skips).
local v
do
  local blob = ARGV[1]
  local total = #blob / 8
  if total <= 1024 then
    -- (the position struct.unpack returns last lands at v[total + 1], unread)
    v = {struct.unpack('<' .. string.rep('i8', total), blob)}
  else
    -- In chunks: struct's values pass on the Lua stack, which is bounded.
    v = {}
    local at = 1
    for first = 1, total, 1024 do
      local n = math.min(total - first + 1, 1024)
      local chunk = {struct.unpack('<' .. string.rep('i8', n), blob, at)}
      at = chunk[n + 1]
      for i = 1, n do v[first + i - 1] = chunk[i] end
    end
  end
end

-- F is the mode (0 decide, 1 dry run, 2 refund, 3 charge) plus 16 times the number of keys that
-- come last in ARGV instead of in KEYS (Redis Cluster: one call for the keys of many
-- slots of one node, which Redis refuses as declared keys; the script carries the
-- allow-cross-slot-keys flag there, see store/limiter_script.hpp).
local mode = v[4] % 16
local dry = mode == 1
do
  local n = (v[4] - mode) / 16
  if n > 0 then
    local first = #ARGV - n
    KEYS = {}
    for i = 1, n do KEYS[i] = ARGV[first + i] end
  end
end
local specs, shapes = {}, {}
local at = 5
for s = 1, v[2] do
  -- An algorithm's constructor is replaced by what it builds, on first use.
  local code = v[at]
  local algo = ALGOS[code]
  if type(algo) == 'function' then
    algo = algo(now, ceil, floor, whole, read_state, zadd_all)
    ALGOS[code] = algo
  end
  -- (the sixth number: shadow 1/0 plus twice max_delay ms, on_exceed: delay's)
  local flags = v[at + 5]
  specs[s] = {algo, v[at + 1], v[at + 2], v[at + 3], v[at + 4], flags % 2 == 1, (flags - flags % 2) / 2}
  at = at + 6
end
for h = 1, v[3] do
  local k = v[at]
  local first = k > 0 and specs[v[at + 1]]
  local shape = {first, k = k, nonce = first and first[1].members or false}
  for i = 2, k do
    local spec = specs[v[at + i]]
    shape[i] = spec
    if spec[1].members then shape.nonce = true end
  end
  shapes[h] = shape
  at = at + k + 1
end

-- Each key's state (which carries its spec), loaded on first use.
local states = {}
local function state(key, spec)
  local st = states[key]
  if not st then
    st = spec[1].load(key, spec, dry)
    states[key] = st
  end
  return st
end

-- A refund (flag 2; Redis Cluster, where a request's limits span slots and are decided
-- one slot per call): each entry is one request that was admitted here but denied by a
-- limit in another slot, and each of its limits gives back its spec's cost (0: nothing,
-- a limit that recorded nothing) of what that request took. A charge (flag 3) is the
-- opposite: each limit takes its spec's cost more, after the fact and whatever its limit
-- (a response's cost; give with a negative cost, which every algorithm that takes one
-- adds). Both answer an empty string.
if mode == 2 or mode == 3 then
  local sign = mode == 3 and -1 or 1
  local key_at, nonce_at = 1, 2
  for _ = 1, v[1] do
    local shape = shapes[v[at]]
    at = at + 2
    local nonce
    if shape.nonce then
      nonce = ARGV[nonce_at]
      nonce_at = nonce_at + 1
    end
    for i = 1, shape.k do
      local spec, key = shape[i], KEYS[key_at + i - 1]
      if spec[5] > 0 then spec[1].give(state(key, spec), spec, sign * spec[5], nonce, i, key) end
    end
    key_at = key_at + shape.k
  end
  for key, st in pairs(states) do
    if st.dirty then st.spec[1].save(key, st, st.spec) end
  end
  return ''
end

-- The reply is built run by run: each run packed as it is decided (one struct.pack of
-- a constant format, no table slot per number), all joined at the end.
local parts, np, key_at, nonce_at = {}, 0, 1, 2
local RUN1 = '<i8i8i8i8i8i8i8'
for _ = 1, v[1] do
  local shape, count = shapes[v[at]], v[at + 1]
  at = at + 2
  local nonce
  if shape.nonce then
    nonce = ARGV[nonce_at]
    nonce_at = nonce_at + 1
  end
  local k = shape.k
  if k == 1 then
    -- One limit (the common case): a denial records nothing anyway, so runs are
    -- decided and recorded in one pass.
    local spec = shape[1]
    local st, take, cost = state(KEYS[key_at], spec), spec[1].take, spec[5]
    while count > 0 do
      local run, allowed, remaining, reset, retry, d_remaining, d_reset = take(st, spec, cost, count, not dry, nonce, 1)
      np = np + 1
      parts[np] = struct.pack(RUN1, run, allowed, remaining, reset, retry, d_remaining, d_reset)
      count = count - run
    end
  else
    -- Several limits: request after request, each a run of one.
    local sts, row, fmt = {}, {1}, '<' .. string.rep('i8', 1 + 6 * k)
    for i = 1, k do sts[i] = state(KEYS[key_at + i - 1], shape[i]) end
    for _ = 1, count do
      local blocked = false
      for i = 1, k do
        local spec, j = shape[i], 6 * i - 4
        local _
        _, row[j], row[j + 1], row[j + 2], row[j + 3] = spec[1].take(sts[i], spec, spec[5], 1, false, nonce, i)
        row[j + 4], row[j + 5] = 0, 0
        if row[j] == 0 and not spec[6] then blocked = true end
      end
      if not blocked and not dry then
        for i = 1, k do
          local spec = shape[i]
          if row[6 * i - 4] == 1 then spec[1].take(sts[i], spec, spec[5], 1, true, nonce, i) end
        end
      end
      np = np + 1
      parts[np] = struct.pack(fmt, unpack(row, 1, 1 + 6 * k))
    end
  end
  key_at = key_at + k
end
if not dry then
  for key, st in pairs(states) do
    if st.dirty then st.spec[1].save(key, st, st.spec) end
  end
end
if np == 1 then return parts[1] end
return table.concat(parts)

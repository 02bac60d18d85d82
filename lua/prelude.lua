-- floodgate limiter scripts. The build concatenates, in order: prelude.lua, the six
-- algorithm files, evaluate.lua, into the one script sent with EVALSHA.
-- Every key is in KEYS; all time comes from Redis TIME; every write sets an expiry
-- in the same command, so no key is ever left without a TTL.
--
-- Each algorithm is a constructor, called only if a call uses the algorithm, with
-- (now, ceil, floor, whole, read_state, zadd_all): it returns three functions over the
-- state of one key (and `members = true` if it names its entries after the request's
-- nonce, so that each of its requests comes alone):
--   load(key, spec, dry) -> st  reads the key, once per call however many requests use it;
--                             with `dry` (a dry run) it writes nothing, not even the removal
--                             of expired entries, and reads past them instead
--   take(st, spec, cost, n, commit, nonce, i)
--       -> k, allowed (1/0), remaining, reset_ms, retry_ms, d_remaining, d_reset
--                             decides the next k (1 <= k <= n) of n alike requests at
--                             once, exactly as one after the other: the j-th of them
--                             (from 0) gets remaining + j*d_remaining and reset_ms +
--                             j*d_reset. With commit, records the k in st (and sets
--                             st.dirty) if they are admitted; a denial records nothing.
--   save(key, st, spec)       writes st back, once per call, only if a take recorded
--   give(st, spec, cost, nonce, i, key)
--                             a refund: gives back `cost` that one admitted request took
--                             (sets st.dirty if st is to be saved); nothing if the key is
--                             gone (its window, and what was taken, expired)
-- A decision's writes happen only in save (and load's removal of expired entries), after
-- every key of the call has been loaded (give, a refund's, goes one slot per call): on a
-- cluster node, a call carrying keys of many slots fails
-- at its first key the node does not serve, before it has written anything, and is sent
-- again slot by slot (src/store/cluster_batcher.hpp). A new algorithm must keep this.
-- spec = {algorithm, a, b, c, cost, shadow, max_delay ms (0: reject)}. A script runs atomically, so reading each key
-- once, deciding every request of the call in memory and writing each key once is the
-- same as one call per request, at a fraction of the work: a run of alike requests
-- costs a few arithmetic steps, not a Lua call and four numbers each.
-- State that is not a ZSET is one string of little-endian doubles (struct.pack), read
-- with one GET and written with one SET that carries the expiry.
--
-- The whole chunk runs on every call, so what it creates is paid per call: in Redis'
-- Lua a closure costs about 0.4k instructions plus 0.1k per upvalue it captures, a
-- table 0.8k to 1.8k, a call to a Lua function 0.4k (callgrind on redis-server 7.0; a
-- GET is 2.9k, a SET 6k). So the helpers capture nothing or one upvalue, the
-- constructors capture nothing (the helpers are passed in), the states are built with
-- all their fields (a table that grows is rehashed at each power of two, about 0.5k
-- each time), and time is read once, up front: every algorithm needs it.
local KEYS, ARGV = KEYS, ARGV
-- (sized up front: a table that grows is rehashed at every power of two)
local ALGOS = {false, false, false, false, false, false}
local FW, SL, SW, TB, GCRA, CC = 1, 2, 3, 4, 5, 6
local mceil, mfloor = math.ceil, math.floor

-- Redis time in ms.
local tm = redis.call('TIME')
local now = tm[1] * 1000 + tm[2] / 1000

-- A plain key's state: its doubles (struct format `fmt`), or nothing if there is no key.
local function read_state(key, fmt)
  local v = redis.call('GET', key)
  if v then return struct.unpack(fmt, v) end
end

-- ZADD of every member in `members`, all with `score` (in chunks: unpack's stack is bounded).
local function zadd_all(key, score, members)
  for first = 1, #members, 256 do
    local args = {}
    for j = first, math.min(#members, first + 255) do
      args[#args + 1] = score
      args[#args + 1] = members[j]
    end
    redis.call('ZADD', key, unpack(args))
  end
end

local function ceil(x) return mceil(x - 1e-9) end
local function floor(x) return mfloor(x + 1e-9) end
-- The step, in whole ms, that a reset moves by per admitted request, when it is whole
-- (a run of admitted requests then has evenly spaced resets); nil when it is not.
local function whole(ms)
  if ms == mfloor(ms) then return ms end
end

-- floodgate limiter scripts. The build concatenates, in order: prelude.lua, the six
-- algorithm files, evaluate.lua, into the one script sent with EVALSHA.
-- Every key is in KEYS; all time comes from Redis TIME; every write sets an expiry
-- in the same step, so no key is ever left without a TTL.
--
-- Each algorithm is a constructor (called only if a call uses the algorithm) of three
-- functions over the state of one key (and `members = true` if it names its entries
-- after the request's nonce):
--   load(key, spec) -> st     reads the key, once per call however many requests use it
--   step(st, spec, cost, commit, nonce, i) -> allowed (1/0), remaining, reset_ms, retry_ms
--                             decides one request against st; with commit, records it in st
--                             (and sets st.dirty); a denied request never records anything
--   save(key, st, spec)       writes st back, once per call, only if a step recorded
-- spec = {algorithm, a, b, c, cost, shadow}. A script runs atomically, so reading each key
-- once, deciding every request of the call in memory and writing each key once is the
-- same as one call per request, at a fraction of the Redis commands.
-- clock() is Redis time in ms: TIME is called once per call, and only if asked for.
local ALGOS = {}

local now
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
  end
  return now
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

local mceil, mfloor = math.ceil, math.floor
local function ceil(x) return mceil(x - 1e-9) end
local function floor(x) return mfloor(x + 1e-9) end

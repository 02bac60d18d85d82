-- floodgate limiter scripts. The build concatenates, in order: prelude.lua, the six
-- algorithm files, evaluate.lua, into the one script sent with EVALSHA.
-- Every key is in KEYS; all time comes from Redis TIME; every write sets an expiry
-- in the same step, so no key is ever left without a TTL.
-- Each algorithm: f(key, clock, a, b, c, cost, commit, member) -> {allowed, limit, remaining, reset_ms, retry_ms}
-- clock() returns Redis time in ms (TIME is called once, and only if an algorithm asks);
-- member() the unique member name of this request for this limit.
local ALGOS = {}

local function ceil(x) return math.ceil(x - 1e-9) end
local function floor(x) return math.floor(x + 1e-9) end

-- Driver. KEYS[i]: the key of limit i. ARGV[1]: a nonce unique to this request.
-- Then 6 arguments per limit: algorithm, a, b, c, cost, shadow (1/0).
-- All limits are checked first; unless one that is not in shadow mode denies, every
-- admitting limit is then recorded. A denied request consumes nothing.
-- Returns 5 integers per limit: allowed, limit, remaining, reset_ms, retry_ms.
local now
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
  end
  return now
end
local nonce = ARGV[1]
local results = {}
local blocked = false
-- One limit (the common case): a denial records nothing anyway, so check and record in one pass.
local single = #KEYS == 1
for i = 1, #KEYS do
  local base = 2 + (i - 1) * 6
  local f = ALGOS[ARGV[base]]
  local member = function() return nonce .. ':' .. i end
  local r = f(KEYS[i], clock, tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3]),
              tonumber(ARGV[base + 4]), single, member)
  results[i] = r
  if r[1] == 0 and ARGV[base + 5] ~= '1' then blocked = true end
end
local out = {}
for i = 1, #KEYS do
  local base = 2 + (i - 1) * 6
  if not single and not blocked and results[i][1] == 1 then
    local f = ALGOS[ARGV[base]]
    f(KEYS[i], clock, tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3]),
      tonumber(ARGV[base + 4]), true, function() return nonce .. ':' .. i end)
  end
  for j = 1, 5 do out[#out + 1] = math.floor(results[i][j]) end
end
return out

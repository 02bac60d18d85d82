-- Driver. Several requests in one call (the gateway batches the concurrent requests
-- of one event-loop turn): ARGV[1] = number of requests; then per request: its nonce,
-- its number of limits k, and 6 arguments per limit (algorithm, a, b, c, cost,
-- shadow 1/0). KEYS holds the requests' keys in the same order.
-- Per request, all limits are checked first; unless one that is not in shadow mode
-- denies, every admitting limit is then recorded: a denied request consumes nothing.
-- Returns 5 integers per limit, request after request: allowed, limit, remaining,
-- reset_ms, retry_ms.
local now
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
  end
  return now
end

local out = {}
local key_at, arg_at = 1, 2
for _ = 1, tonumber(ARGV[1]) do
  local nonce = ARGV[arg_at]
  local k = tonumber(ARGV[arg_at + 1])
  arg_at = arg_at + 2
  -- One limit (the common case): a denial records nothing anyway, so one pass.
  local single = k == 1
  local results = {}
  local blocked = false
  for i = 1, k do
    local base = arg_at + (i - 1) * 6
    local member = function() return nonce .. ':' .. i end
    local r = ALGOS[ARGV[base]](KEYS[key_at + i - 1], clock, tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]),
                                tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4]), single, member)
    results[i] = r
    if r[1] == 0 and ARGV[base + 5] ~= '1' then blocked = true end
  end
  for i = 1, k do
    local base = arg_at + (i - 1) * 6
    if not single and not blocked and results[i][1] == 1 then
      local member = function() return nonce .. ':' .. i end
      ALGOS[ARGV[base]](KEYS[key_at + i - 1], clock, tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]),
                        tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4]), true, member)
    end
    for j = 1, 5 do out[#out + 1] = math.floor(results[i][j]) end
  end
  key_at = key_at + k
  arg_at = arg_at + k * 6
end
return out

-- sliding_window_counter.lua: approximate, constant-memory decision for every limit of one route,
-- atomically. Each limit keeps two fixed-window counters in one hash; the estimate is
-- previous * (1 - elapsed / window) + current.
--
-- KEYS[1..n]  one hash per limit: w = index of the current fixed window, c = its count,
--             p = the previous window's count, l = window length (a changed window resets)
-- KEYS[n+1]   the block marker of this key (read or set only when ARGV[3] > 0): the string
--             "<index of the limit that started the block>:<block end in microseconds>"
-- ARGV[1]     now in microseconds since the epoch, or "" to read the Redis server clock (TIME)
-- ARGV[2]     cost of this request; 0 peeks: reports usage, records nothing, starts no block
-- ARGV[3]     block_for in milliseconds; 0 when the route does not block
-- ARGV[4]     unused (same argument layout as sliding_log.lua)
-- ARGV[5..]   per limit: limit, window in microseconds
--
-- Reply: the same layout as sliding_log.lua: { code, retry_us, used_i, reset_us_i, retry_us_i ... }
-- with used_i the estimate rounded up. Only allowed requests are counted. Each hash expires two
-- windows after its last write, when it could no longer weigh on any estimate.


-- Needs Redis 5 or newer: scripts replicate their effects, so reading TIME before writing is allowed.
local n = #KEYS - 1
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local cost = tonumber(ARGV[2])
local block_ms = tonumber(ARGV[3])

local limits, windows, index, elapsed, cur, prev = {}, {}, {}, {}, {}, {}
for i = 1, n do
  limits[i] = tonumber(ARGV[3 + 2 * i])
  local window = tonumber(ARGV[4 + 2 * i])
  windows[i] = window
  index[i] = math.floor(now / window)
  elapsed[i] = now - index[i] * window
  local state = redis.call('HMGET', KEYS[i], 'w', 'c', 'p', 'l')
  local w, c, p, l = tonumber(state[1]), tonumber(state[2]) or 0, tonumber(state[3]) or 0, tonumber(state[4])
  cur[i], prev[i] = 0, 0
  if w ~= nil and l == window then
    if w == index[i] then
      cur[i], prev[i] = c, p
    elseif w == index[i] - 1 then
      prev[i] = c
    end
  end
end

local function estimate(i)
  return prev[i] * (windows[i] - elapsed[i]) / windows[i] + cur[i]
end

-- Time until estimate(i) + cost <= limit, assuming nothing else is counted meanwhile.
local function wait_for(i)
  local room = limits[i] - cost
  if room < 0 then return windows[i] end
  local w, e = windows[i], elapsed[i]
  if cur[i] <= room then
    -- the previous window's weight must shrink: prev * (w - t) / w <= room - cur
    local t = w * (1 - (room - cur[i]) / prev[i])
    return math.max(1, math.ceil(t - e))
  end
  -- wait for the next window, then for the current count (now previous) to shrink
  local t = w * (1 - room / cur[i])
  return math.max(1, math.ceil((w - e) + t))
end

local function reply(code, retry, per_limit_retry)
  local out = { code, retry }
  for i = 1, n do
    out[#out + 1] = math.ceil(estimate(i) - 1e-9)
    out[#out + 1] = windows[i] - elapsed[i]
    out[#out + 1] = per_limit_retry[i] or 0
  end
  return out
end

if block_ms > 0 then
  -- the marker holds "<limit index>:<until, in the script's clock>"; its TTL only cleans up
  local marker = redis.call('GET', KEYS[n + 1])
  if marker then
    local worst, untl = string.match(marker, '^(%d+):(%d+)$')
    local remaining = (tonumber(untl) or 0) - now
    if remaining > 0 then
      local r = {}
      r[tonumber(worst)] = remaining
      return reply(2, remaining, r)
    end
  end
end

local retry, worst, per_limit_retry = 0, 1, {}
for i = 1, n do
  if estimate(i) + cost > limits[i] + 1e-9 then
    local wait = wait_for(i)
    per_limit_retry[i] = wait
    if wait > retry then retry, worst = wait, i end
  end
end

if retry > 0 then
  if block_ms > 0 and cost > 0 then
    -- the marker remembers which limit started the block, for the 429s during it
    redis.call('SET', KEYS[n + 1], worst .. ':' .. string.format('%.0f', now + block_ms * 1000), 'PX', block_ms)
    if block_ms * 1000 > retry then retry = block_ms * 1000 end
    per_limit_retry[worst] = retry
  end
  return reply(0, retry, per_limit_retry)
end

if cost > 0 then
  for i = 1, n do
    cur[i] = cur[i] + cost
    redis.call('HSET', KEYS[i], 'w', index[i], 'c', cur[i], 'p', prev[i], 'l', windows[i])
    redis.call('PEXPIRE', KEYS[i], math.ceil(2 * windows[i] / 1000))
  end
end
return reply(1, 0, per_limit_retry)

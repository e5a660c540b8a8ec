-- bench/peer/sliding_log.lua: a frozen, standalone copy of lua/sliding_log.lua as it was when the
-- benchmark peer was written. It is the "hand-made" script the NGINX + Lua peer runs with one
-- EVALSHA per request; slidegate's own lua/ may change without changing this file.
--
-- sliding_log.lua: exact sliding-window decision for every limit of one route, atomically.
--
-- KEYS[1..n]  one sorted set per limit; members are request ids, scores their time in microseconds
-- KEYS[n+1]   the block marker of this key (read or set only when ARGV[3] > 0): the string
--             "<index of the limit that started the block>:<block end in microseconds>"
-- ARGV[1]     now in microseconds since the epoch, or "" to read the Redis server clock (TIME)
-- ARGV[2]     cost of this request; 0 peeks: reports usage, records nothing, starts no block
-- ARGV[3]     block_for in milliseconds; 0 when the route does not block
-- ARGV[4]     a token unique to this decision; members are "<token>:<i>", i = 1..cost
-- ARGV[5..]   per limit: limit, window in microseconds (2 values per key, in KEYS order)
--
-- Reply: { code, retry_us, used_1, reset_us_1, retry_us_1, ..., used_n, reset_us_n, retry_us_n }
--   code      1 allowed (every limit charged), 0 rejected (nothing charged), 2 blocked
--   retry_us  0 when allowed; otherwise how long until this request would fit (or the block lapses)
--   used_i    entries in the window after the decision
--   reset_us_i time until the oldest entry leaves the window (the next unit comes back); 0 if empty
--   retry_us_i time until limit i alone would let this request through; 0 if it has room
--
-- An entry at time s counts while now - window < s <= now, so it leaves at exactly s + window:
-- when k entries must leave for the request to fit, the exact wait is s_k + window - now, where
-- s_k is the k-th oldest score. Only allowed requests are recorded, so a rejected flood never
-- extends a lockout, and each key gets a PEXPIRE of one window so idle keys vanish.


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
local token = ARGV[4]

local limits, windows, used = {}, {}, {}
for i = 1, n do
  limits[i] = tonumber(ARGV[3 + 2 * i])
  windows[i] = tonumber(ARGV[4 + 2 * i])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - windows[i])
  used[i] = redis.call('ZCARD', KEYS[i])
end

local function oldest_reset(i)
  if used[i] == 0 then return 0 end
  local first = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
  local reset = tonumber(first[2]) + windows[i] - now
  if reset < 0 then return 0 end
  return reset
end

local function reply(code, retry, per_limit_retry)
  local out = { code, retry }
  for i = 1, n do
    out[#out + 1] = used[i]
    out[#out + 1] = oldest_reset(i)
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
  local over = used[i] + cost - limits[i]
  if over > 0 then
    local wait
    if cost > limits[i] then
      wait = windows[i]
    else
      local entry = redis.call('ZRANGE', KEYS[i], over - 1, over - 1, 'WITHSCORES')
      wait = tonumber(entry[2]) + windows[i] - now
      if wait < 1 then wait = 1 end
    end
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
    for j = 1, cost do
      redis.call('ZADD', KEYS[i], now, token .. ':' .. j)
    end
    redis.call('PEXPIRE', KEYS[i], math.ceil(windows[i] / 1000))
    used[i] = used[i] + cost
  end
end
return reply(1, 0, per_limit_retry)

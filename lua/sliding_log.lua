-- sliding_log.lua: the exact sliding log, one sorted set per (route, limit, key); members are
-- request units, scores their time in microseconds. `decide.lua` is appended to make the script
-- (see lua/README.md for the whole contract).
--
-- An entry at time s counts while now - window < s <= now, so it leaves at exactly s + window:
-- when k entries must leave for a request to fit, the exact wait is s_k + window - now, where s_k
-- is the k-th oldest score. Only allowed requests are recorded, so a rejected flood never extends
-- a lockout, and every charged key gets a PEXPIRE of one window, so idle keys vanish.
--
-- Within one call every charge is made at `now`: charges are kept in `pending` and written with
-- one ZADD at the end (`flush_state`). Before an entry is looked up by rank, pending entries are
-- written first, so ranks stay exact even when a gateway's clock put earlier entries after `now`.
--
-- Needs Redis 5 or newer: scripts replicate their effects, so reading TIME before writing is allowed.

-- A key's state: `count` units in the window (stored and pending), `oldest` the oldest stored
-- score (nil when none), `pending` the members to add at `now`.
local function load_state(key, window)
  local s = { key = key, window = window, count = 0, oldest = nil, pending = {} }
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if first[2] == nil then return s end
  if tonumber(first[2]) <= now - window then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
    first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if first[2] == nil then return s end
  end
  s.oldest = tonumber(first[2])
  s.count = redis.call('ZCARD', key)
  return s
end

local function used(s)
  return s.count
end

local function fits(s, limit, cost)
  return s.count + cost <= limit
end

local function write_pending(s)
  local members = s.pending
  if #members == 0 then return end
  for i = 1, #members, 500 do
    local args = {}
    for j = i, math.min(i + 499, #members) do
      args[#args + 1] = now
      args[#args + 1] = members[j]
    end
    redis.call('ZADD', s.key, unpack(args))
  end
  redis.call('PEXPIRE', s.key, math.ceil(s.window / 1000))
  if s.oldest == nil or now < s.oldest then s.oldest = now end
  s.pending = {}
end

local function wait(s, limit, cost)
  if cost > limit then return s.window end
  write_pending(s)
  local rank = s.count + cost - limit - 1
  local entry = redis.call('ZRANGE', s.key, rank, rank, 'WITHSCORES')
  local w = tonumber(entry[2]) + s.window - now
  if w < 1 then w = 1 end
  return w
end

local function charge(s, cost, member)
  for j = 1, cost do
    s.pending[#s.pending + 1] = member .. '.' .. j
  end
  s.count = s.count + cost
end

local function reset(s)
  if s.count == 0 then return 0 end
  local oldest = s.oldest
  if #s.pending > 0 and (oldest == nil or now < oldest) then oldest = now end
  local r = oldest + s.window - now
  if r < 0 then return 0 end
  return r
end

local function flush_state(s)
  write_pending(s)
end

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
-- one ZADD at the end (`finish`). Before an entry is looked up by rank, pending entries are
-- written first, so ranks stay exact even when a gateway's clock put earlier entries after `now`.
--
-- Needs Redis 5 or newer: scripts replicate their effects, so reading TIME before writing is allowed.

-- Limits up to this size are read whole (one ZRANGE gives the count, the oldest entry and every
-- rank); larger ones read the oldest entry and the count apart.
local SMALL = 64

-- Whether `charge` needs a unique member per request (the sorted sets record a member per unit).
local MEMBERS = true

-- The number of KEYS a decision uses before its block marker: one sorted set per limit.
local function key_count(n)
  return n
end

-- A limit's state: `count` units in the window (stored and pending), `oldest` the oldest stored
-- score (nil when none), `scores` the stored scores in order when the set was read whole,
-- `n_pending` members to add at `now`: the first in `first`, the others in `rest` (made on the
-- second: most states of a call are charged once, and a table less is an allocation less).
local NONE = {}
local function load_state(key, limit, window)
  local s = { key = key, window = window, count = 0, oldest = nil, scores = nil,
              first = nil, rest = nil, n_pending = 0 }
  local horizon = now - window
  if limit < SMALL then
    local entries = call('ZRANGE', key, '0', int(limit), 'WITHSCORES')
    local n_entries = #entries
    -- a set found empty (a new key) shares one empty list; `scores` is only ever read
    local scores, n, stale = NONE, 0, false
    if n_entries > 0 then scores = {} end
    for i = 2, n_entries, 2 do
      local score = entries[i] + 0
      if score <= horizon then
        stale = true
      else
        n = n + 1
        scores[n] = score
      end
    end
    if stale then call('ZREMRANGEBYSCORE', key, '-inf', int(horizon)) end
    if n_entries < 2 * (limit + 1) then
      -- the read saw the whole set: no more entries than these
      s.scores, s.count, s.oldest = scores, n, scores[1]
      return s
    end
    -- more than `limit` entries (the limit was lowered): count them apart
  else
    local first = call('ZRANGE', key, '0', '0', 'WITHSCORES')
    if first[2] == nil then return s end
    local oldest = first[2] + 0
    if oldest > horizon then
      -- nothing has left the window: the oldest entry stands
      s.oldest, s.count = oldest, call('ZCARD', key)
      return s
    end
    call('ZREMRANGEBYSCORE', key, '-inf', int(horizon))
  end
  local first = call('ZRANGE', key, '0', '0', 'WITHSCORES')
  if first[2] == nil then return s end
  s.oldest = first[2] + 0
  s.count = call('ZCARD', key)
  return s
end

-- Every state of the call by key (each limit has a key of its own), and in load order.
local by_key, states, n_states = {}, {}, 0
local function state_of(key, name, limit, window)
  local s = by_key[key]
  if s ~= nil then return s end
  s = load_state(key, limit, window)
  by_key[key] = s
  n_states = n_states + 1
  states[n_states] = s
  return s
end

local function fits(s, limit, cost)
  return s.count + cost <= limit
end

-- ZADD's arguments for a state with several pending members, one table for every such write of
-- the call (passed with an explicit count, at most 500 members a command).
local zadd_args = {}
local function write_pending(s)
  local n = s.n_pending
  if n == 0 then return end
  if n == 1 then
    call('ZADD', s.key, now_s, s.first)
  else
    local rest = s.rest
    zadd_args[1], zadd_args[2] = now_s, s.first
    local m = 2
    for k = 2, n do
      zadd_args[m + 1] = now_s
      zadd_args[m + 2] = rest[k - 1]
      m = m + 2
      if m == 1000 or k == n then
        call('ZADD', s.key, unpack(zadd_args, 1, m))
        m = 0
      end
    end
  end
  call('PEXPIRE', s.key, int(ceil(s.window / 1000)))
  if s.oldest == nil or now < s.oldest then s.oldest = now end
  s.first, s.rest, s.n_pending = nil, nil, 0
  s.scores = nil
end

-- The score of the entry at 0-based `rank` among stored and pending entries.
local function score_at(s, rank)
  if s.scores and s.n_pending == 0 then return s.scores[rank + 1] end
  write_pending(s)
  local rank_s = format('%d', rank)
  local entry = call('ZRANGE', s.key, rank_s, rank_s, 'WITHSCORES')
  return entry[2] + 0
end

local function wait(s, limit, cost)
  if cost > limit then return s.window end
  local w = score_at(s, s.count + cost - limit - 1) + s.window - now
  if w < 1 then w = 1 end
  return w
end

local function add_pending(s, member)
  local n = s.n_pending + 1
  if n == 1 then
    s.first = member
  else
    local rest = s.rest
    if rest == nil then
      rest = {}
      s.rest = rest
    end
    rest[n - 1] = member
  end
  s.n_pending = n
end

local function charge(s, cost, member)
  add_pending(s, member)
  for j = 2, cost do add_pending(s, member .. '.' .. format('%d', j)) end
  s.count = s.count + cost
end

-- Units in the window, and the time until the oldest of them leaves (0 when none is counted).
local function report(s)
  local count = s.count
  if count == 0 then return 0, 0 end
  local oldest = s.oldest
  if s.n_pending > 0 and (oldest == nil or now < oldest) then oldest = now end
  local r = oldest + s.window - now
  if r < 0 then r = 0 end
  return count, r
end

-- After every decision of the call: one ZADD and one PEXPIRE per charged set.
local function finish()
  for i = 1, n_states do write_pending(states[i]) end
end

-- sliding_log.lua: the exact sliding log. ONE sorted set per (route, key, counting class) holds
-- the entries of every sliding_log limit of the route that counts that key the same way (the
-- Grab layout: one set per user, one count per window). Members are request units, scores their
-- time in microseconds. The build wraps this file in a scope of its own and `decide.lua` calls
-- the functions it returns (see lua/README.md for the whole contract).
--
-- An entry at time s counts in a limit's window while now - window < s <= now, so it leaves at
-- exactly s + window: when k entries must leave for a request to fit, the exact wait is
-- s_k + window - now, where s_k is the k-th oldest score inside that window. Only allowed
-- requests are recorded, and once per request whatever the number of limits sharing the set.
-- Entries older than the set's longest window are evicted as the set is read; the set expires
-- one longest window after its last entry.
--
-- Within one call every charge is made at `now`: charges are kept pending and written with one
-- ZADD and one PEXPIRE per set at the end (`finish`). In a set of limits that count outcomes,
-- an entry is a reservation until `confirm` marks its attempt answered (a member ending in '!',
-- after the tag of the value the attempt sent where the limit's key merges values:
-- "<member>~<hex>!"). A reservation is written at the latest instant it may still be in flight
-- (`now + settle`, the limit's `settle`), so it counts in every window until it is answered,
-- however slow the upstream; its answer (`confirm`, `unanswered`) moves it back to the instant
-- of its charge, where an answered attempt counts. Counts read every entry after the horizon
-- (no upper bound), and the set lives a longest window past its latest entry.

-- A set whose longest-window limit is below this is read whole (one ZRANGE gives every count,
-- the oldest entries and every rank); a larger one is counted with ZCARD / ZCOUNT.
local SMALL = 32
local NONE = {}

-- The sets of the call by key, and in order. The tables in `set_list` are kept for the next
-- call and made afresh field by field (a library keeps them: a new table per set and call, with
-- its views, is most of what a decision allocates); `n_sets` of them are this call's.
local sets, set_list, n_sets = {}, {}, 0
-- Tells this call's views from those a kept table holds from earlier calls.
local generation = 0

-- Forgets the previous call's sets.
local function begin()
  for i = 1, n_sets do sets[set_list[i].key] = nil end
  n_sets = 0
end

-- A set's table for this call: a kept one made afresh, or a new one. `buffer` (the scores read
-- whole) and `rest` (pending members after the first) are kept with it: only their first `n`
-- and `n_pending - 1` entries are this call's.
local function fresh(key, window)
  n_sets = n_sets + 1
  generation = generation + 1
  local st = set_list[n_sets]
  if st == nil then
    st = { key = key, window = window, n = 0, scores = false, oldest = false, views = false,
           first = false, rest = false, n_pending = 0, charged = 0, ahead = 0, st = false, stored = 0,
           off = 0, buffer = false, generation = generation }
    st.st = st
    set_list[n_sets] = st
  else
    st.key, st.window, st.n, st.scores, st.oldest = key, window, 0, false, false
    st.first, st.n_pending, st.charged, st.stored, st.off, st.ahead = false, 0, 0, 0, 0, 0
    st.generation = generation
  end
  sets[key] = st
  return st
end

-- The set of `key` for this call: `n` stored entries inside the longest window `window`,
-- `scores` all of them in order when the set was read whole, `oldest` the first of them,
-- pending members to add at `now` (the first in `first`, the others in `rest`). The set is
-- also the view of its longest window (`st`, `stored`, `off`: see `view`), and every field is
-- in the constructor, so the table never grows during the call (Lua would rehash it).
local function open(key, window, bound)
  local st = sets[key]
  if st ~= nil then return st end
  st = fresh(key, window)
  local horizon = now - window
  if bound < SMALL then
    -- live entries are at most `bound`, stale ones at most as many again
    local want = 2 * bound + 1
    local entries = call('ZRANGE', key, '0', int(want), 'WITHSCORES')
    local n_entries = #entries
    local scores, n, stale = NONE, 0, false
    if n_entries > 0 then
      scores = st.buffer
      if not scores then
        scores = {}
        st.buffer = scores
      end
    end
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
    if n_entries < 2 * (want + 1) then
      st.scores, st.n = scores, n
      if n > 0 then st.oldest = scores[1] end
      return st
    end
    -- more entries than the limits allow (a limit was lowered): count them apart
  else
    local first = call('ZRANGE', key, '0', '0', 'WITHSCORES')
    if first[2] == nil then return st end
    local oldest = first[2] + 0
    if oldest > horizon then
      st.oldest, st.n = oldest, call('ZCARD', key)
      return st
    end
    call('ZREMRANGEBYSCORE', key, '-inf', int(horizon))
  end
  local first = call('ZRANGE', key, '0', '0', 'WITHSCORES')
  if first[2] == nil then return st end
  st.oldest = first[2] + 0
  st.n = call('ZCARD', key)
  return st
end

-- The score of the stored entry at 0-based `rank`.
local function score_at(st, rank)
  if st.scores then return st.scores[rank + 1] end
  if rank == 0 then return st.oldest end
  local rank_s = int(rank)
  return call('ZRANGE', st.key, rank_s, rank_s, 'WITHSCORES')[2] + 0
end

-- One limit's view of its set: `stored` entries inside its window, the first of them at rank
-- `off`. Views of one window are shared by every limit and decision of the call; the view of
-- the longest window is the set itself (no table of its own).
local function view(st, name, limit, window, param)
  if window == st.window then
    st.stored = st.n
    return st
  end
  local views = st.views
  if not views then
    views = {}
    st.views = views
  end
  local w = views[window]
  if w == nil or w.generation ~= st.generation then
    local stored = st.n
    if window < st.window and stored > 0 then
      local horizon = now - window
      if st.scores then
        stored = 0
        local scores = st.scores
        for i = st.n, 1, -1 do
          if scores[i] <= horizon then break end
          stored = stored + 1
        end
      else
        stored = call('ZCOUNT', st.key, '(' .. int(horizon), '+inf')
      end
    end
    if w == nil then
      w = { st = st, window = window, stored = stored, off = st.n - stored,
            generation = st.generation }
      views[window] = w
    else
      w.stored, w.off, w.generation = stored, st.n - stored, st.generation
    end
  end
  return w
end

local function used(v)
  return v.stored + v.st.n_pending
end

local function fits(v, limit, cost)
  return used(v) + cost <= limit
end

local function wait(v, limit, cost)
  if cost > limit then return v.window end
  local k = used(v) + cost - limit - 1
  local w = v.window
  if k < v.stored then w = score_at(v.st, v.off + k) + v.window - now end
  if w < 1 then w = 1 end
  return w
end

local function add_pending(st, member)
  local n = st.n_pending + 1
  if n == 1 then
    st.first = member
  else
    local rest = st.rest
    if not rest then
      rest = {}
      st.rest = rest
    end
    rest[n - 1] = member
  end
  st.n_pending = n
end

-- Records the request once in the set, whatever the number of its limits sharing it; a limit
-- whose reservations stay in flight up to `settle` writes them that far ahead (see the top).
local function charge(v, cost, member, d, settle)
  local st = v.st
  if settle > st.ahead then st.ahead = settle end
  if st.charged == d then return end
  st.charged = d
  add_pending(st, member)
  for j = 2, cost do add_pending(st, member .. '.' .. int(j)) end
end

-- Units in the window, and the time until the oldest of them leaves (0 when none is counted).
local function report(v)
  local count = used(v)
  if count == 0 then return 0, 0 end
  local oldest = now
  if v.stored > 0 then oldest = score_at(v.st, v.off) end
  local r = oldest + v.window - now
  if r < 0 then r = 0 end
  return count, r
end

-- Whether a refusal stands on reservations still in flight: 0 when the answered entries of the
-- limit's window alone leave no room for `cost` (the refusal is the answers'), else the time
-- until the soonest reservation in it is settled (its score: `settle` after its charge, at
-- least 1 µs; a charge of this call counts as made now). An entry marked kept without an
-- answer ('?', see `unanswered`), or a reservation past its `settle` (its settlement lost), is
-- an attempt whose status never came: it counts, but it is no answer, so a refusal that stands
-- on such attempts alone starts no block either and waits as the window says (-1). Read on a
-- refusal by a limit that counts outcomes.
local function in_flight(v, key, name, limit, cost, settle)
  local entries = call('ZRANGEBYSCORE', key, '(' .. int(now - v.window), '+inf', 'WITHSCORES')
  local answered, soonest, kept = 0, nil, false
  for i = 1, #entries, 2 do
    local last = string.byte(entries[i], -1)
    if last == 33 then
      answered = answered + 1
    elseif last == 63 then
      kept = true
    elseif soonest == nil then
      local settled_by = entries[i + 1] + 0
      if settled_by > now then soonest = settled_by else kept = true end
    end
  end
  if answered + cost > limit then return 0 end
  if soonest == nil then
    if kept then return -1 end
    soonest = now + settle
  end
  local w = soonest - now
  if w < 1 then w = 1 end
  return w
end

-- A refund takes the request's members out of the set (a release too: members never added are
-- not there to take).
local function refund(key, name, limit, window, param, member, at, cost, found_only)
  if cost == 1 then
    call('ZREM', key, member)
    return
  end
  local members = { member }
  for j = 2, cost do members[j] = member .. '.' .. int(j) end
  call('ZREM', key, unpack(members))
end

-- Gives the members of a charge of `cost` units whose first is `member`, made at `at`, the
-- ending `mark`, each at the charge's instant (a reservation was written `settle` ahead): an
-- answered attempt counts in the window of its charge.
local function mark(key, member, at, cost, ending)
  for j = 1, cost do
    local m = member
    if j > 1 then m = member .. '.' .. int(j) end
    -- a member still there (not refunded) goes back to its charge's instant, written ahead
    if call('ZREM', key, m) == 1 then call('ZADD', key, at, m .. ending) end
  end
end

-- An entry is a reservation in flight until its attempt is answered; a counted answer gives its
-- members the answered form (the tag of the value sent, if any, and a trailing '!', which no
-- member the script writes ends with), so a reset can tell them apart.
local function confirm(key, name, limit, window, param, member, at, cost, tag)
  mark(key, member, at, cost, tag .. '!')
end

-- An attempt kept without an answer (its status never came) stays counted; its members take a
-- trailing '?', so `in_flight` tells it from a reservation still in flight at once, not only
-- once it is older than `settle`, and a reset, which forgives only the '!' members, keeps it.
local function unanswered(key, name, limit, window, param, member, at, cost)
  mark(key, member, at, cost, '?')
end

-- Settles a reservation of `cost` units to `amount` (at most the limit: the script caps it):
-- units beyond `amount` leave the set; units beyond the reservation are recorded at `now`, the
-- charge made at once, and the set lives a longest window after them.
local function settle(key, name, limit, window, param, member, at, cost, amount, longest)
  if amount < cost then
    local members, n = {}, 0
    for j = amount + 1, cost do
      n = n + 1
      if j == 1 then members[n] = member else members[n] = member .. '.' .. int(j) end
    end
    call('ZREM', key, unpack(members))
  elseif amount > cost then
    local args, m = {}, 0
    for j = cost + 1, amount do
      args[m + 1] = now_s
      if j == 1 then args[m + 2] = member else args[m + 2] = member .. '.' .. int(j) end
      m = m + 2
      if m == 1000 or j == amount then
        call('ZADD', key, unpack(args, 1, m))
        m = 0
      end
    end
    outlive(key, ceil(longest / 1000))
  end
end

-- A reset forgives the answered entries (with a tag, only those of the same value sent) and
-- keeps the others; returns whether the set is left empty.
local function clear(key, name, tag)
  local members = call('ZRANGE', key, '0', '-1')
  local answered, n = {}, 0
  local ending = tag .. '!'
  for i = 1, #members do
    local m = members[i]
    if string.byte(m, -1) == 33 and (tag == '' or string.sub(m, -#ending) == ending) then
      n = n + 1
      answered[n] = m
    end
  end
  if n == #members then
    call('DEL', key)
    return true
  end
  for first = 1, n, 1000 do
    local last = first + 999
    if last > n then last = n end
    call('ZREM', key, unpack(answered, first, last))
  end
  return false
end

-- ZADD's arguments for a set with several pending members (at most 500 members a command).
local zadd_args = {}
local function write_pending(st)
  local n = st.n_pending
  local at = now_s
  if st.ahead > 0 then at = int(now + st.ahead) end
  if n == 1 then
    call('ZADD', st.key, at, st.first)
  else
    local rest = st.rest
    zadd_args[1], zadd_args[2] = at, st.first
    local m = 2
    for k = 2, n do
      zadd_args[m + 1] = at
      zadd_args[m + 2] = rest[k - 1]
      m = m + 2
      if m == 1000 or k == n then
        call('ZADD', st.key, unpack(zadd_args, 1, m))
        m = 0
      end
    end
  end
  call('PEXPIRE', st.key, int(ceil((st.window + st.ahead) / 1000)))
end

-- After every decision of the call: one ZADD and one PEXPIRE per charged set.
local function finish()
  for i = 1, n_sets do
    local st = set_list[i]
    if st.n_pending > 0 then write_pending(st) end
  end
end

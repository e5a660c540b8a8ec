-- gcra.lua: the generic cell rate algorithm, O(1) memory. `limit` per `window` refills as a
-- steady rate (one unit every window / limit) with a burst of up to `burst` units (the limit
-- when not set). Every gcra limit of one (route, key) lives in one hash, a field per limit.
--
-- The state is the debt: how far the theoretical arrival time is ahead of now. It is kept in
-- units of microseconds times the limit, so one unit costs exactly `window` and a microsecond
-- pays back exactly `limit`: every step is whole-number arithmetic, exact in a double while
-- burst * window < 2^53 (the config refuses more). A request of `cost` fits when
-- debt + cost * window <= burst * window, and its exact wait is the time until that holds.
--
-- Field: "<window> <limit> <time of the last charge> <debt then> <debt before that charge>
-- <the charge's member>": a refund of the latest charge restores the debt before it exactly; an
-- older charge's refund is not applied (the debt may have been paid back in between, and
-- taking it off again would let more through than the rate allows). A field "<limit>!" counts
-- the answered attempts a reset may forgive (see `add_answered`). The build wraps this file in
-- a scope of its own (see lua/README.md for the whole contract).

-- The call's hashes (prelude's `field_hashes`): a field is "<window> <limit> <time of the last
-- charge> <debt then> <debt before it> <its member>"; a hash lives until its largest debt is
-- paid back (and a millisecond more, as PEXPIRE counts whole milliseconds).
local hashes = field_hashes(function(s)
  return int(s.window) .. ' ' .. int(s.limit) .. ' ' .. now_s .. ' ' .. int(s.debt) .. ' '
    .. int(s.prev) .. ' ' .. s.member
end, function(s)
  return ceil(s.debt / s.limit) + 1000
end)

-- Forgets the previous call's hashes.
local function begin()
  hashes.begin()
end

local function open(key, window, bound)
  return hashes.open(key)
end

local function parse(stored)
  local w, l, t, debt, prev, member =
    string.match(stored, '^(%d+) (%d+) (%d+) (%d+) (%d+) (%S+)$')
  if member == nil then return nil end
  return w + 0, l + 0, t + 0, debt + 0, prev + 0, member
end

-- The debt at `now` of a debt `debt` left at time `t`: it pays back `limit` a microsecond.
local function decayed(debt, t, limit)
  if now <= t or debt == 0 then return debt end
  local elapsed = now - t
  if elapsed >= ceil(debt / limit) then return 0 end
  return debt - elapsed * limit
end

-- The largest whole number a double holds exactly.
local MAX_EXACT = 9007199254740991

-- What a debt `debt` kept under a window of `from` owes under a window of `to` (a reload changed
-- the limit's window): the units still owed carry over, each costing the new window, rounded up;
-- at most MAX_EXACT. A changed limit alone keeps the debt: one unit costs the window whatever
-- the limit (the debt pays back at the new rate from now on).
local function carried(debt, from, to)
  if from == to or debt == 0 then return debt end
  local d = ceil(debt * to / from)
  if d > MAX_EXACT then d = MAX_EXACT end
  return d
end

local function view(h, name, limit, window, burst)
  local found = hashes.state_of(h, name)
  if found then return found end
  if burst == 0 then burst = limit end
  local debt, carrying = 0, false
  local stored = h.fields[name]
  if stored then
    -- counts survive a reload: a debt kept under another limit or window carries over, and is
    -- written back as the new limit's (it pays back at the new rate from now on)
    local w, l, t, d = parse(stored)
    if w ~= nil then
      debt = carried(decayed(d, t, l), w, window)
      carrying = w ~= window or l ~= limit
    end
  end
  local s = { name = name, window = window, limit = limit, burst = burst, debt = debt,
              prev = debt, member = '-', charged = carrying }
  return hashes.add_state(h, s)
end

local function fits(s, limit, cost)
  return s.debt + cost * s.window <= s.burst * s.window
end

local function wait(s, limit, cost)
  if cost > s.burst then return s.window end
  local w = ceil((s.debt + (cost - s.burst) * s.window) / s.limit)
  if w < 1 then w = 1 end
  return w
end

local function charge(s, cost, member, d)
  s.prev = s.debt
  s.debt = s.debt + cost * s.window
  s.member = member
  s.charged = true
end

-- Units used (the limit less the whole units that fit now, counted up to the limit: a burst above
-- it is room the headers do not show, so `r` never exceeds `q`), and the time until one more fits.
local function report(s)
  local w, limit = s.window, s.limit
  local remaining = floor((s.burst * w - s.debt) / w)
  if remaining > limit then remaining = limit end
  if remaining < 0 then remaining = 0 end
  local used = limit - remaining
  if used == 0 then return 0, 0 end
  local r = ceil((s.debt - (s.burst - remaining - 1) * w) / limit)
  if r < 0 then r = 0 end
  return used, r
end

-- Answered units: a field "<limit>!" holds "<units> <charge instant of the earliest>" (a limit
-- name never holds '!'): the attempts answered (counted, or refunded when the refund could not
-- be applied) whose charges may still weigh in the debt. The debt pays back `limit` a
-- microsecond whoever owes it, so those units still owe at least
-- units * window - (now - earliest) * limit: what a reset forgives, never more, so the
-- reservations still in flight keep their whole weight.
local function answered_units(stored)
  local u, e = string.match(stored, '^(%d+) (%d+)$')
  if e == nil then return 0, now end
  return u + 0, e + 0
end

-- What `units` charged from `earliest` on still owe at least (in the debt's units).
local function still_owed(units, earliest, window, limit)
  local elapsed = now - earliest
  if elapsed < 0 then elapsed = 0 end
  return units * window - elapsed * limit
end

-- Adds `cost` units charged at `at` to the units in field `side` ("<limit>!": answered;
-- "<limit>?": kept without an answer, in the same form).
local function add_units(key, side, window, limit, at, cost)
  at = at + 0
  local units, earliest = cost, at
  local stored = call('HGET', key, side)
  if stored then
    local u, e = answered_units(stored)
    -- units that owe nothing any more are dropped: the bound only shrinks
    if still_owed(u, e, window, limit) > 0 then
      units = u + cost
      if e < at then earliest = e end
    end
  end
  call('HSET', key, side, int(units) .. ' ' .. int(earliest))
end

local function add_answered(key, name, window, limit, at, cost)
  add_units(key, name .. '!', window, limit, at, cost)
end

-- A refund restores the debt before the key's latest charge exactly; an earlier charge's refund
-- cannot be taken off the debt (it may have been paid back in between), so its attempt joins
-- the answered ones, which the next reset forgives. A release (`found_only`: the charge may
-- never have been made) takes back only the latest charge, which it can tell, and leaves
-- anything else as it is.
local function refund(key, name, limit, window, burst, member, at, cost, found_only)
  local stored = call('HGET', key, name)
  if not stored then return end
  local w, l, t, debt, prev, last = parse(stored)
  if w ~= window or l ~= limit then return end
  if last ~= member then
    if not found_only then add_answered(key, name, window, limit, at, cost) end
    return
  end
  call('HSET', key, name, int(w) .. ' ' .. int(l) .. ' ' .. int(t) .. ' ' .. int(prev) .. ' '
    .. int(prev) .. ' -')
end

-- Settles a reservation of `cost` units to `amount`. Units beyond `amount` go back as a refund
-- does: exactly when the charge is the key's latest, otherwise not at all (the strict side).
-- Units beyond the reservation are charged at once: the debt grows by them now.
local function settle(key, name, limit, window, burst, member, at, cost, amount, longest)
  if amount == cost then return end
  local stored = call('HGET', key, name)
  local w, l, t, debt, prev, last = 0, limit, now, 0, 0, '-'
  if stored then w, l, t, debt, prev, last = parse(stored) end
  if stored and (w ~= window or l ~= limit) then return end
  if amount < cost then
    if last ~= member then return end
    debt = debt - (cost - amount) * window
    if debt < prev then debt = prev end
    call('HSET', key, name, int(window) .. ' ' .. int(limit) .. ' ' .. int(t) .. ' '
      .. int(debt) .. ' ' .. int(prev) .. ' -')
    return
  end
  local owed = decayed(debt, t, limit) + (amount - cost) * window
  local written = t
  if now > t then written = now end
  call('HSET', key, name, int(window) .. ' ' .. int(limit) .. ' ' .. int(written) .. ' '
    .. int(owed) .. ' ' .. int(owed) .. ' -')
  outlive(key, ceil((ceil(owed / limit) + 1000) / 1000))
end

-- What the units in field `side` still owe at least, in view `s` (0 without them).
local function owed_by(key, side, s)
  local stored = call('HGET', key, side)
  if not stored then return 0 end
  local units, earliest = answered_units(stored)
  local owed = still_owed(units, earliest, s.window, s.limit)
  if owed < 0 then return 0 end
  return owed
end

-- Whether a refusal stands on reservations still in flight: 0 when what the answered attempts
-- still owe at least leaves no room for `cost`; -1 when it does with what the attempts kept
-- without an answer owe; else `settle` (the debt keeps no time per charge: the longest a
-- reservation can stay in flight).
local function in_flight(s, key, name, limit, cost, settle)
  local room = (s.burst - cost) * s.window
  local owed = owed_by(key, name .. '!', s)
  if owed > room then return 0 end
  if owed + owed_by(key, name .. '?', s) > room then return -1 end
  return settle
end

-- Whether field `name` still holds the debt of `window` and `limit` (under a changed limit the
-- debt is carried over, see `carried`, but what it owed then is nothing to tally).
local function holds(key, name, window, limit)
  local stored = call('HGET', key, name)
  if not stored then return false end
  local w, l = parse(stored)
  return w == window and l == limit
end

local function confirm(key, name, limit, window, burst, member, at, cost)
  if holds(key, name, window, limit) then add_answered(key, name, window, limit, at, cost) end
end

-- The charge stays counted though its status never came: its units are kept apart from the
-- answered ones ("<limit>?"), so a refusal that stands on them tells the window's wait, and a
-- reset keeps them.
local function unanswered(key, name, limit, window, burst, member, at, cost)
  if holds(key, name, window, limit) then add_units(key, name .. '?', window, limit, at, cost) end
end

-- A reset forgives what the answered attempts still owe at least; the rest of the debt (the
-- reservations in flight) stays.
local function clear(key, name)
  local stored = call('HGET', key, name)
  local answered = call('HGET', key, name .. '!')
  call('HDEL', key, name .. '!')
  if not stored or not answered then return end
  local w, l, t, debt = parse(stored)
  if w == nil then return end
  local units, earliest = answered_units(answered)
  local owed = decayed(debt, t, l)
  local forgiven = still_owed(units, earliest, w, l)
  if forgiven <= 0 then return end
  if forgiven >= owed then
    call('HDEL', key, name, name .. '?')
    return
  end
  local left, written = owed - forgiven, t
  if now > t then written = now end
  call('HSET', key, name, int(w) .. ' ' .. int(l) .. ' ' .. int(written) .. ' ' .. int(left)
    .. ' ' .. int(left) .. ' -')
end

local function finish()
  hashes.finish()
end

-- sliding_window_counter.lua: approximate, constant memory. Every limit keeps two fixed-window
-- counters; all counter limits of one (route, key) live in one hash, so a decision reads it
-- once and writes it once whatever the number of limits. One field per limit, named after it,
-- holds "<index of the current fixed window> <its count> <the previous window's count>
-- <window length>" (under a changed length, the estimate is carried whole into the current
-- window: see `carried`). The estimate is
-- p * (1 - elapsed / window) + c. Only allowed requests are counted; the hash expires two of its
-- longest windows after its last write, when it can no longer weigh on any estimate. A field
-- "<limit>!" counts the answered units a reset forgives (see `confirm`), "<limit>?" the units
-- kept without an answer (see `unanswered`). The build wraps this
-- file in a scope of its own (see lua/README.md for the whole contract).

-- The call's hashes (prelude's `field_hashes`): a field is "<index> <count> <previous>
-- <window>"; a hash lives two of its longest charged windows after this write.
local hashes = field_hashes(function(s)
  return int(s.index) .. ' ' .. int(s.cur) .. ' ' .. int(s.prev) .. ' ' .. int(s.window)
end, function(s)
  return 2 * s.window
end)

-- Forgets the previous call's hashes.
local function begin()
  hashes.begin()
end

local function open(key, window, bound)
  return hashes.open(key)
end

-- "<index> <count> <previous> <length>" as numbers, or nil when it does not parse.
local function parse(stored)
  local w, c, p, l = string.match(stored, '^(%d+) (%d+) (%d+) (%d+)$')
  if l == nil then return nil end
  return w + 0, c + 0, p + 0, l + 0
end

-- The estimate now, rounded up, of counts "<w> <c> <p>" kept under a window of length `l`: what
-- a limit whose window a reload changed carries into its current fixed window (its fixed
-- windows no longer line up; the count survives, weighing whole until that window ends).
local function carried(w, c, p, l)
  local index = floor(now / l)
  local cur, prev = 0, 0
  if w == index then
    cur, prev = c, p
  elseif w == index - 1 then
    prev = c
  end
  return ceil((prev * (l - (now - index * l)) + cur * l) / l)
end

-- A limit's state: its fixed window `index`, `elapsed` in it, the counts `cur` and `prev`, and
-- `base` = prev * (window - elapsed), the previous window's weight times the window (prev does
-- not change within a call).
local function view(h, name, limit, window, param)
  local found = hashes.state_of(h, name)
  if found then return found end
  local index = floor(now / window)
  local elapsed = now - index * window
  local cur, prev, carrying = 0, 0, false
  local stored = h.fields[name]
  if stored then
    local w, c, p, l = parse(stored)
    if l == window then
      if w == index then
        cur, prev = c, p
      elseif w == index - 1 then
        prev = c
      end
    elseif l ~= nil then
      -- written back in the new window's layout, so it weighs by the new window
      cur, carrying = carried(w, c, p, l), true
    end
  end
  local s = { name = name, window = window, index = index, elapsed = elapsed,
              cur = cur, prev = prev, base = prev * (window - elapsed), charged = carrying }
  return hashes.add_state(h, s)
end

-- The estimate times the window: p * (window - elapsed) + c * window. A whole number, exact in
-- a double while limit * window < 2^53 (the config refuses more), so the comparisons need no
-- tolerance.
local function fits(s, limit, cost)
  local w = s.window
  return s.base + (s.cur + cost) * w <= limit * w
end

-- Time from now until the estimate is at most `target`, nothing else being counted meanwhile.
local function time_until(s, target)
  local w, e = s.window, s.elapsed
  if target < 0 then return w end
  if s.cur <= target then
    if s.prev == 0 then return 0 end
    -- within this window the previous count's weight shrinks: prev * (w - e - t) / w <= target - cur
    local t = (w - e) - (target - s.cur) * w / s.prev
    if t < 0 then return 0 end
    return ceil(t)
  end
  -- in the next window this count becomes the previous one: cur * (w - e') / w <= target, so
  -- e' >= w * (cur - target) / cur (one division last: a whole result stays whole)
  return ceil((w - e) + w * (s.cur - target) / s.cur)
end

local function wait(s, limit, cost)
  local t = time_until(s, limit - cost)
  if t < 1 then t = 1 end
  return t
end

local function charge(s, cost, member, d)
  s.cur = s.cur + cost
  s.charged = true
end

-- The estimate rounded up, and the time until the next unit of the quota comes back (until the
-- estimate, rounded up, drops by one).
local function report(s)
  local w = s.window
  local used = ceil((s.base + s.cur * w) / w)
  if used <= 0 then return 0, 0 end
  return used, time_until(s, used - 1)
end

-- A limit's stored counts read straight from its hash (settlements run before the call's
-- decisions open their hashes), when they are of this window length; and written back.
local function stored_counts(key, name, window)
  local stored = call('HGET', key, name)
  if not stored then return nil end
  local w, c, p, l = parse(stored)
  if l ~= window then return nil end
  return w, c, p
end

local function write_counts(key, name, w, c, p, window)
  call('HSET', key, name, int(w) .. ' ' .. int(c) .. ' ' .. int(p) .. ' ' .. int(window))
end

-- A refund takes the units back from the fixed window they were counted in (the current one,
-- or the previous one if a window has turned since); older charges no longer weigh anything.
-- A release (`found_only`: the charge may never have been made) takes nothing: the counts keep
-- no trace of one charge, and taking back one never made would take back another's.
local function refund(key, name, limit, window, param, member, at, cost, found_only)
  if found_only then return end
  local w, c, p = stored_counts(key, name, window)
  if w == nil then return end
  local index = floor((at + 0) / window)
  if w == index then
    c = c - cost
    if c < 0 then c = 0 end
  elseif w == index + 1 then
    p = p - cost
    if p < 0 then p = 0 end
  else
    return
  end
  write_counts(key, name, w, c, p, window)
end

-- Settles a reservation of `cost` units to `amount`: units beyond `amount` go back as a refund
-- does; units beyond the reservation are counted at once, in the fixed window of `now`.
local function settle(key, name, limit, window, param, member, at, cost, amount, longest)
  if amount < cost then
    refund(key, name, limit, window, param, member, at, cost - amount)
    return
  end
  if amount == cost then return end
  local extra = amount - cost
  local index = floor(now / window)
  local w, c, p = stored_counts(key, name, window)
  if w == index then
    c = c + extra
  elseif w ~= nil and w == index - 1 then
    w, c, p = index, extra, c
  else
    w, c, p = index, extra, 0
  end
  write_counts(key, name, w, c, p, window)
  outlive(key, ceil(2 * window / 1000))
end

-- Tallies of a limit's counted units: a field "<limit>!" (answered, written by `confirm`) or
-- "<limit>?" (kept without an answer, written by `unanswered`) holds "<index> <units in that
-- fixed window> <in the one before it>" (a limit name never holds '!' or '?'). A reset takes off
-- the answered units and keeps the rest; a refusal tells apart what it stands on (`in_flight`).
-- Only a charge whose window still weighs is tallied (its field exists: the hash keeps its
-- expiry).
local function tally(key, field)
  local stored = call('HGET', key, field)
  if not stored then return nil end
  local i, a, b = string.match(stored, '^(%d+) (%d+) (%d+)$')
  if b == nil then return nil end
  return i + 0, a + 0, b + 0
end

local function answered(key, name)
  return tally(key, name .. '!')
end

-- The units of a tally (`i`, `a`, `b`) that weigh in view `s`: in its fixed window, and in the
-- one before.
local function weighed(s, i, a, b)
  if i == s.index then return a, b end
  if i == s.index - 1 then return 0, a end
  return 0, 0
end

-- Whether a refusal stands on reservations still in flight: 0 when the answered units alone,
-- weighed as the estimate weighs them, leave no room for `cost`; -1 when they do with the units
-- kept without an answer (attempts whose status never came); else `settle` (the counter keeps
-- no time per charge: the longest a reservation can stay in flight).
local function in_flight(s, key, name, limit, cost, settle)
  local w = s.window
  local function refuses(cur, prev)
    return prev * (w - s.elapsed) + (cur + cost) * w > limit * w
  end
  local cur, prev = weighed(s, answered(key, name))
  if refuses(cur, prev) then return 0 end
  local kept_cur, kept_prev = weighed(s, tally(key, name .. '?'))
  if refuses(cur + kept_cur, prev + kept_prev) then return -1 end
  return settle
end

-- Adds `cost` units charged at `at` to the tally in `field` of limit `name`.
local function add_to_tally(key, name, field, window, at, cost)
  local w = stored_counts(key, name, window)
  if w == nil then return end
  local index = floor((at + 0) / window)
  if index + 1 < w then return end
  local i, a, b = tally(key, field)
  if i == nil or i + 1 < index then
    i, a, b = index, cost, 0
  elseif i == index - 1 then
    i, a, b = index, cost, a
  elseif i == index then
    a = a + cost
  elseif i == index + 1 then
    b = b + cost
  else
    return
  end
  call('HSET', key, field, int(i) .. ' ' .. int(a) .. ' ' .. int(b))
end

local function confirm(key, name, limit, window, param, member, at, cost)
  add_to_tally(key, name, name .. '!', window, at, cost)
end

-- The charge stays counted though its status never came: tallied apart from the answered ones,
-- so a refusal that stands on such attempts tells the window's wait, and a reset keeps them.
local function unanswered(key, name, limit, window, param, member, at, cost)
  add_to_tally(key, name, name .. '?', window, at, cost)
end

-- A reset takes the answered units off both fixed windows; what is still in flight stays.
-- (Never tagged: the config refuses reset_status with a key that merges values here.)
local function clear(key, name)
  local stored = call('HGET', key, name)
  local i, a, b = answered(key, name)
  call('HDEL', key, name .. '!')
  if not stored or i == nil then return end
  local w, c, p, l = parse(stored)
  if l == nil then return end
  local function units_in(index)
    if index == i then return a end
    if index == i - 1 then return b end
    return 0
  end
  c = c - units_in(w)
  p = p - units_in(w - 1)
  if c < 0 then c = 0 end
  if p < 0 then p = 0 end
  if c == 0 and p == 0 then
    call('HDEL', key, name, name .. '?')
  else
    write_counts(key, name, w, c, p, l)
  end
  return true
end

local function finish()
  hashes.finish()
end

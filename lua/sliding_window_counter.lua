-- sliding_window_counter.lua: approximate, constant memory. Every limit keeps two fixed-window
-- counters; all limits of one (route, key) live in one hash, so a decision reads it once and
-- writes it once whatever the number of limits. One field per limit, named after it, holds
-- "<index of the current fixed window> <its count> <the previous window's count> <window length>"
-- (a changed length starts afresh). The estimate is p * (1 - elapsed / window) + c. `decide.lua`
-- is appended to make the script (see lua/README.md for the whole contract). Only allowed
-- requests are counted; the hash expires two of its longest windows after its last write, when
-- it can no longer weigh on any estimate.
--
-- Needs Redis 5 or newer: scripts replicate their effects, so reading TIME before writing is allowed.

-- Whether `charge` needs a unique member per request (counts need no members).
local MEMBERS = false

-- The number of KEYS a decision uses before its block marker: one hash for every limit.
local function key_count(n)
  return 1
end

-- Each hash of the call, read once: `fields` the stored text by field (a hash found empty shares
-- NONE, which is only read), its limits' states in its array part (h[1]..h[h.n]), and the list
-- of hashes in load order for `finish`.
local hashes, hash_list, n_hashes, NONE = {}, {}, 0, {}

local function hash_of(key)
  local h = hashes[key]
  if h ~= nil then return h end
  -- room for two states in the array part before it grows
  h = { false, false, key = key, fields = NONE, n = 0 }
  local all = call('HGETALL', key)
  if #all > 0 then
    local fields = {}
    for i = 1, #all, 2 do fields[all[i]] = all[i + 1] end
    h.fields = fields
  end
  hashes[key] = h
  n_hashes = n_hashes + 1
  hash_list[n_hashes] = h
  return h
end

-- A limit's state: its fixed window `index`, `elapsed` in it, the counts `cur` and `prev`, and
-- `base` = prev * (window - elapsed), the previous window's weight times the window (prev does
-- not change within a call).
local function state_of(key, name, limit, window)
  local h = hash_of(key)
  for i = 1, h.n do
    local s = h[i]
    if s.name == name then return s end
  end
  local index = floor(now / window)
  local elapsed = now - index * window
  local cur, prev = 0, 0
  local stored = h.fields[name]
  if stored then
    local w, c, p, l = string.match(stored, '^(%d+) (%d+) (%d+) (%d+)$')
    if l and l + 0 == window then
      w = w + 0
      if w == index then
        cur, prev = c + 0, p + 0
      elseif w == index - 1 then
        prev = c + 0
      end
    end
  end
  local s = { name = name, window = window, index = index, elapsed = elapsed,
              cur = cur, prev = prev, base = prev * (window - elapsed), charged = false }
  local n = h.n + 1
  h[n] = s
  h.n = n
  return s
end

-- The estimate times the window: p * (window - elapsed) + c * window. A whole number, exact in
-- a double while limit * window < 2^53 (e.g. 14,000 a week), so the comparisons need no
-- tolerance: a tolerance in units lets a request through early by tolerance * window
-- (1e-9 units was 86 µs on a one-day window).
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

local function charge(s, cost, member)
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

-- After every decision of the call: one HSET and one PEXPIRE per charged hash, which expires two
-- of its longest charged windows after this write.
local args = {}
local function finish()
  for j = 1, n_hashes do
    local h = hash_list[j]
    local m, ttl = 0, 0
    for i = 1, h.n do
      local s = h[i]
      if s.charged then
        args[m + 1] = s.name
        local value = int(s.index) .. ' ' .. int(s.cur) .. ' ' .. int(s.prev) .. ' ' .. int(s.window)
        args[m + 2] = value
        m = m + 2
        if 2 * s.window > ttl then ttl = 2 * s.window end
      end
    end
    if m > 0 then
      call('HSET', h.key, unpack(args, 1, m))
      call('PEXPIRE', h.key, int(ceil(ttl / 1000)))
    end
  end
end

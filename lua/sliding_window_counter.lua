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

-- Whether each limit of a decision has a key of its own (one hash for every limit).
local KEY_PER_LIMIT = false

-- The number of KEYS a decision uses before its block marker: one hash for every limit.
local function key_count(n)
  return 1
end

-- Each hash, read once per call: field -> stored text (a hash found empty shares NONE, which is
-- only read), and the states to write back by field.
local hashes, NONE = {}, {}

local function load_state(key, name, limit, window)
  local h = hashes[key]
  if h == nil then
    h = { fields = NONE, dirty = {}, ttl = 0 }
    local all = call('HGETALL', key)
    if #all > 0 then
      local fields = {}
      for i = 1, #all, 2 do fields[all[i]] = all[i + 1] end
      h.fields = fields
    end
    hashes[key] = h
  end
  local index = floor(now / window)
  local s = { hash = h, name = name, window = window, index = index, elapsed = now - index * window, cur = 0, prev = 0 }
  local stored = h.fields[name]
  if stored then
    local w, c, p, l = string.match(stored, '^(%d+) (%d+) (%d+) (%d+)$')
    if tonumber(l) == window then
      w = tonumber(w)
      if w == index then
        s.cur, s.prev = tonumber(c), tonumber(p)
      elseif w == index - 1 then
        s.prev = tonumber(c)
      end
    end
  end
  return s
end

-- The estimate times the window: p * (window - elapsed) + c * window. A whole number, exact in
-- a double while limit * window < 2^53 (e.g. 14,000 a week), so the comparisons need no
-- tolerance: a tolerance in units lets a request through early by tolerance * window
-- (1e-9 units was 86 µs on a one-day window).
local function scaled(s)
  return s.prev * (s.window - s.elapsed) + s.cur * s.window
end

local function used(s)
  return ceil(scaled(s) / s.window)
end

local function fits(s, limit, cost)
  return scaled(s) + cost * s.window <= limit * s.window
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
  s.hash.dirty[s.name] = s
  if 2 * s.window > s.hash.ttl then s.hash.ttl = 2 * s.window end
end

-- Until the next unit of the quota comes back: the estimate, rounded up, drops by one.
local function reset(s)
  local u = used(s)
  if u <= 0 then return 0 end
  return time_until(s, u - 1)
end

-- After every decision of the call: one HSET and one PEXPIRE per charged hash.
local function finish(states, n)
  local args = {}
  for key, h in pairs(hashes) do
    local m = 0
    for field, s in pairs(h.dirty) do
      args[m + 1] = field
      args[m + 2] = format('%d %d %d %d', s.index, s.cur, s.prev, s.window)
      m = m + 2
    end
    if m > 0 then
      call('HSET', key, unpack(args, 1, m))
      call('PEXPIRE', key, int(ceil(h.ttl / 1000)))
    end
  end
end

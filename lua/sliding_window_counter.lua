-- sliding_window_counter.lua: approximate, constant memory. Each (route, limit, key) keeps two
-- fixed-window counters in one hash (w = index of the current fixed window, c = its count,
-- p = the previous window's count, l = the window length; a changed length starts afresh); the
-- estimate is p * (1 - elapsed / window) + c. `decide.lua` is appended to make the script (see
-- lua/README.md for the whole contract). Only allowed requests are counted; each hash expires
-- two windows after its last write, when it can no longer weigh on any estimate.
--
-- Needs Redis 5 or newer: scripts replicate their effects, so reading TIME before writing is allowed.

local function load_state(key, window)
  local index = math.floor(now / window)
  local s = { key = key, window = window, index = index, elapsed = now - index * window, cur = 0, prev = 0, dirty = false }
  local h = redis.call('HMGET', key, 'w', 'c', 'p', 'l')
  local w, c, p, l = tonumber(h[1]), tonumber(h[2]) or 0, tonumber(h[3]) or 0, tonumber(h[4])
  if w ~= nil and l == window then
    if w == index then
      s.cur, s.prev = c, p
    elseif w == index - 1 then
      s.prev = c
    end
  end
  return s
end

local function estimate(s)
  return s.prev * (s.window - s.elapsed) / s.window + s.cur
end

local function used(s)
  return math.ceil(estimate(s) - 1e-9)
end

local function fits(s, limit, cost)
  return estimate(s) + cost <= limit + 1e-9
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
    return math.ceil(t)
  end
  -- in the next window this count becomes the previous one: cur * (w - e') / w <= target
  return math.ceil((w - e) + w * (1 - target / s.cur))
end

local function wait(s, limit, cost)
  local t = time_until(s, limit - cost)
  if t < 1 then t = 1 end
  return t
end

local function charge(s, cost, member)
  s.cur = s.cur + cost
  s.dirty = true
end

-- Until the next unit of the quota comes back: the estimate, rounded up, drops by one.
local function reset(s)
  local u = used(s)
  if u <= 0 then return 0 end
  return time_until(s, u - 1)
end

local function flush_state(s)
  if not s.dirty then return end
  redis.call('HSET', s.key, 'w', s.index, 'c', s.cur, 'p', s.prev, 'l', s.window)
  redis.call('PEXPIRE', s.key, math.ceil(2 * s.window / 1000))
end

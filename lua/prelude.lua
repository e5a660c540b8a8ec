-- prelude.lua: the first piece of the decision code: the library locals, the call's instant,
-- cached integer formatting and parsing, and the hashes of the field-per-limit algorithms.
--
-- The code runs in two ways. As a script (EVALSHA) the whole text runs on every call. As a
-- Redis Functions library (FCALL) the text runs once per load (on the library's first call:
-- while a library loads, Redis lets it see nothing but `redis.register_function`): everything
-- at the top level (these helpers, the algorithms' scopes, the parsed plans) is built once and
-- kept, and only `decide` (lua/decide.lua) runs per call. So nothing here may touch Redis or the call's
-- arguments at the top level, every piece of per-call state is reset by `begin_call` or by its
-- algorithm's `begin`, and nothing creates a global (a library may not).
--
-- `now` (set by `begin_call` from the call's first argument: now in microseconds since the
-- epoch, or "" to read the Redis server clock, TIME, so gateway instances with skewed clocks
-- still agree: store.clock = "redis", the default) is a number for arithmetic; `now_s` is the
-- same instant as a string, for arguments of redis.call. Redis turns a Lua number argument into
-- text with printf("%.17g"), whose exact expansion of a 16-digit double costs microseconds
-- (multi-precision arithmetic in glibc): every number handed to Redis, or joined into a string,
-- in the scripts is a string made once, or an integer formatted with string.format('%d') (far
-- cheaper, though still a printf: `int` formats each value once).
--
-- The library functions the scripts call per decision are locals: a global is two table lookups
-- (the globals table, then the library table) on every use.
--
-- Numbers are read from text (arguments, scores, stored fields: all written by slidegate or
-- Redis) with `text + 0`: Lua's tonumber runs strtod twice, arithmetic on a string once.
local floor, ceil, format, unpack = math.floor, math.ceil, string.format, unpack
local call = redis.call

local now, now_s

-- The most entries the caches below keep: a library keeps them across calls, and values that
-- hold an instant never repeat.
local CACHE_MAX = 4096

-- A whole number as text, without floating-point formatting. The values that repeat (limits,
-- expiries in ms, the counter's window indexes and counts) are formatted once.
local ints, n_ints = {}, 0
local function int(x)
  local text = ints[x]
  if text == nil then
    text = format('%d', x)
    ints[x] = text
    n_ints = n_ints + 1
  end
  return text
end

-- A number from text that repeats (plan indexes, costs), parsed once: strtod costs more than a
-- table lookup.
local parsed, n_parsed = {}, 0
local function num(text)
  local v = parsed[text]
  if v == nil then
    v = text + 0
    parsed[text] = v
    n_parsed = n_parsed + 1
  end
  return v
end

-- The zeros that pad TIME's microseconds to six digits, by their number of digits.
local PAD = { '00000', '0000', '000', '00', '0', '' }

-- The start of every call: its instant, from its first argument; caches that grew past their
-- bound start afresh.
local function begin_call(argv)
  if argv[1] == '' then
    local t = call('TIME')
    now_s = t[1] .. PAD[#t[2]] .. t[2]
  else
    now_s = argv[1]
  end
  now = now_s + 0
  if n_ints > CACHE_MAX then ints, n_ints = {}, 0 end
  if n_parsed > CACHE_MAX then parsed, n_parsed = {}, 0 end
end

-- Makes `key` live at least `ms` more milliseconds (a settlement that charges more writes at
-- `now`): the expiry only grows, so another limit's longer need sharing the key is kept.
local function outlive(key, ms)
  local left = call('PTTL', key)
  if left < ms then call('PEXPIRE', key, int(ms)) end
end

-- The hashes of the algorithms that keep one field per limit in one hash per key
-- (sliding_window_counter, gcra): each algorithm makes its own set with `field_hashes(value,
-- lasts)`; `begin()` forgets the previous call's hashes. `open(key)` reads a hash once per call (its fields by name in `fields`; a hash found
-- empty shares NONE, which is only read) and keeps its limits' states in its array part
-- (`state_of` finds one, `add_state` adds one); `finish()` writes each hash's charged states
-- with one HSET and one PEXPIRE: `value(s)` is a state's field text, `lasts(s)` how long (µs)
-- the hash must live for it.
local function field_hashes(value, lasts)
  local hashes, list, n_list, NONE, args = {}, {}, 0, {}, {}
  local set = {}
  function set.begin()
    hashes = {}
    for i = 1, n_list do list[i] = nil end
    n_list = 0
  end
  function set.open(key)
    local h = hashes[key]
    if h ~= nil then return h end
    h = { false, false, key = key, fields = NONE, n = 0 }
    local all = call('HGETALL', key)
    if #all > 0 then
      local fields = {}
      for i = 1, #all, 2 do fields[all[i]] = all[i + 1] end
      h.fields = fields
    end
    hashes[key] = h
    n_list = n_list + 1
    list[n_list] = h
    return h
  end
  function set.state_of(h, name)
    for i = 1, h.n do
      local s = h[i]
      if s.name == name then return s end
    end
    return nil
  end
  function set.add_state(h, s)
    local n = h.n + 1
    h[n] = s
    h.n = n
    return s
  end
  function set.finish()
    for j = 1, n_list do
      local h = list[j]
      local m, ttl = 0, 0
      for i = 1, h.n do
        local s = h[i]
        if s.charged then
          args[m + 1], args[m + 2] = s.name, value(s)
          m = m + 2
          local t = lasts(s)
          if t > ttl then ttl = t end
        end
      end
      if m > 0 then
        call('HSET', h.key, unpack(args, 1, m))
        call('PEXPIRE', h.key, int(ceil(ttl / 1000)))
      end
    end
  end
  return set
end

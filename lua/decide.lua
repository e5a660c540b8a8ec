-- decide.lua: the part every algorithm shares, appended after the prelude and the algorithms'
-- scopes (the table ALG holds each algorithm's functions by its code, made on first use). It
-- defines `decide(KEYS, ARGV)`, the call itself: a script returns `decide(KEYS, ARGV)`, a
-- Functions library registers it (see lua/README.md); what does not depend on the call (the
-- helpers below, the plans already parsed in a library) is made once per load. Each algorithm returns
-- `open(key, window, bound)` (its state of one key, loaded once per call), `view(state, name,
-- limit, window, param)` (one limit's view of it), `fits(v, limit, cost)`, `wait(v, limit,
-- cost)`, `charge(v, cost, member, d)`, `report(v)` (units used, time until the next one comes
-- back), `in_flight(v, key, name, limit, cost, settle)` (whether a refusal stands on
-- reservations still in flight), `refund(key, name, limit, window, param, member, at, cost,
-- found_only)` (found_only: a release, which takes back only a charge it can find),
-- `confirm(..., tag)`, `unanswered(key, name, limit, window, param, member, at, cost)` (kept
-- without an answer), `settle(key, name, limit, window, param, member, at, cost, amount,
-- longest)`, `clear(key, name, tag)` and `finish()` (writes every charged state), and
-- `begin()` (forgets the previous call's states).
--
-- One call first applies settlements (refunds of reservations whose outcome was not counted,
-- confirmations of answered ones that stay counted, resets), then decides many requests ("decisions"), all at one instant `now`, in arrival
-- order: each decision's limits are all charged or none is. A key met again later in the same
-- call is loaded once, its writes are made once at the end, and every decision sees the
-- charges of the decisions before it.
--
-- ARGV[1]   now in microseconds since the epoch, or "" to read the Redis server clock (TIME)
-- ARGV[2]   a token unique to this call; a decision's member is "<token><d>" (its first unit)
--           and "<token><d>.<j>" (unit j), unique across calls and gateways. An empty token
--           makes the call a dry run: decided exactly as it would be (a key met again sees the
--           charges and blocks of the decisions before it), but nothing is written
-- ARGV[3]   P, the number of plans; then per plan one argument, its fields each followed by a
--           tab: block_ms (0: the route does not block), block_growth, block_max_ms,
--           block_forget_ms, S (key slots), Q (states), Q pairs: algorithm code, slot,
--           N (limits), N septuples: state, name, limit, window in µs (concurrency: the
--           lease), param (gcra: burst), settle in µs (0: every charge counts at once; else the
--           limit counts outcomes and a reservation is settled at most this long after its
--           charge: a sliding log writes it that far ahead), flags (1: the limit is charged one unit per attempt whatever
--           the decision's cost; 2: its refusal starts no block),
--           then the route's refusal index (its key, "-": none) and a "0"/"1" per limit
--           saying whether that limit's refusals are recorded ("-" without an index)
-- then      R, the number of settlements; per settlement:
--             plan, kind ("r" refund, "l" release: a refund of a charge that may never have
--             been made, taking back only what it finds, "c" confirm: answered and counted, "u" kept without an
--             answer: counted, never answered, "x" reset: its own
--             charge refunded and the answered charges forgiven, "s<N>" settle: the charge made
--             N units, at most the limit; "c" and "x" may be followed by a tag, "~<hex>": the
--             value the attempt sent, where the limit's key merges values), member, decided-at
--             µs, cost, M, M limit indexes
-- then      D, the number of decisions, and one argument listing them: "plan cost " per
--           decision (cost 0 reads usage)
-- KEYS      per settlement, then per decision: its plan's Q state keys, then its S block
--           markers when the plan blocks. A cluster call that spans slots of one node declares
--           no KEYS and passes the same list at the end of ARGV instead.
--
-- Reply: { now, then per decision: code, retry_us, block_level, block_left_us, used_1,
--          reset_us_1, retry_us_1, ..., used_n, reset_us_n, retry_us_n }
--   code         1 allowed (every limit charged), 0 rejected (nothing charged; a blocking plan
--                starts a block on every key slot whose limit refused on answered attempts),
--                2 a key is blocked
--   retry_us_i   negative when limit i refuses only for reservations still in flight (its wait,
--                the magnitude, is until the soonest of them is settled, at most `settle`) or
--                for attempts kept without an answer (the magnitude is `settle` plus the
--                window's wait): it started no block
--   retry_us     0 when allowed; otherwise how long until this request would fit
--   block_level  the level of the block named (or the highest level any of its keys keeps)
--   block_left_us  with code 2, what is left of the block serving; 0 otherwise
--
-- Block marker: "<limit name> <block end µs> <level>", kept block_forget past the block's end,
-- so the next block of the key is one level up while it exists. A block belongs to the limit
-- that started it: once a reload removes or renames that limit, or gives it another key, its
-- marker refuses nothing (its level still counts for the next block).
--
-- Refusal index (a plan with one): a charging decision that refuses (code 0 or 2) records, per
-- key slot, its recording limit with the longest wait (the first of equals): ZADD of member
-- "<limit name>|<material>" (the key as stored, read from the slot's state key) scored by when
-- the refusal ends (µs), and HSET of the member to the refusal's instant (µs) in the hash
-- "<index>:at" (same hash tag), which lists it newest first; a new member trims the index to its
-- MAX_REFUSED latest-ending entries (ZREMRANGEBYRANK) and drops the trimmed ones' instants
-- (HDEL), and the TTL of each is raised to the refusal's end when shorter (PTTL, PEXPIRE).
-- Allowed decisions, reads and dry runs write nothing here.

-- The call's own state, set by `decide` (library-level so that the helpers below are made once
-- per load, not once per call). `blocks` is made when a call first needs it; `out` (the reply)
-- and `plans` are kept and refilled: a library returns the same reply table every call (Redis
-- reads it up to its first nil before the next call runs).
local token, dry, keys
local blocks
local out, o = {}, 0
local plans = {}

-- Plans parsed in earlier calls, by their text (a library only: `LIBRARY` is set by the
-- wrapper the build adds; a script starts afresh on every call). Bounded: a table that fills
-- up starts afresh.
local PLAN_CACHE_MAX = 1024
local plan_cache, n_plan_cache = {}, 0

-- The most entries a refusal index keeps (src/store/refused.rs: MAX_REFUSED).
local MAX_REFUSED = 1000

-- One plan from its arguments `argv[a + 1]` on; returns it and the index of its last argument.
local function parse_plan(argv, a)
  -- every field in the constructor: a table that grows later is rehashed
  local plan = { block_ms = argv[a + 1] + 0, growth = argv[a + 2] + 0, max_ms = argv[a + 3] + 0,
                 forget_ms = argv[a + 4] + 0, slots = argv[a + 5] + 0, q = argv[a + 6] + 0,
                 n = 0, keys = 0, alg = {}, sslot = {}, swin = {}, sbound = {},
                 lstate = {}, names = {}, limits = {}, windows = {}, params = {},
                 settles = {}, settling = false, unit = false, noblock = false, index = false,
                 records = {} }
  a = a + 6
  for j = 1, plan.q do
    plan.alg[j] = ALG[argv[a + 1] + 0]
    plan.sslot[j] = argv[a + 2] + 0
    plan.swin[j], plan.sbound[j] = 0, 0
    a = a + 2
  end
  plan.n = argv[a + 1] + 0
  a = a + 1
  for i = 1, plan.n do
    local q, limit, window = argv[a + 1] + 0, argv[a + 3] + 0, argv[a + 4] + 0
    plan.lstate[i], plan.names[i], plan.limits[i], plan.windows[i] = q, argv[a + 2], limit, window
    plan.params[i], plan.settles[i] = argv[a + 5] + 0, argv[a + 6] + 0
    if plan.settles[i] > 0 then plan.settling = true end
    local flags = argv[a + 7] + 0
    a = a + 7
    -- per-limit flags, kept only by plans that have one (the others pay one test per limit)
    if flags % 2 == 1 then
      if not plan.unit then plan.unit = {} end
      plan.unit[i] = true
    end
    if flags >= 2 then
      if not plan.noblock then plan.noblock = {} end
      plan.noblock[i] = true
    end
    -- a state's longest window, and the entries its limit lets into that window
    if window > plan.swin[q] or (window == plan.swin[q] and limit < plan.sbound[q]) then
      plan.swin[q], plan.sbound[q] = window, limit
    end
  end
  if argv[a + 1] ~= '-' then
    plan.index = argv[a + 1]
    local recorded = argv[a + 2]
    for i = 1, plan.n do plan.records[i] = string.byte(recorded, i) == 49 end
  end
  a = a + 2
  plan.keys = plan.q
  if plan.block_ms > 0 then plan.keys = plan.q + plan.slots end
  return plan, a
end

-- One plan from its text (its fields, each followed by a tab), parsed once per library load
-- when the text recurs (the same route and tier send the same text); in a script, parsed.
local function read_plan(text)
  local plan = LIBRARY and plan_cache[text]
  if plan then return plan end
  local fields, n = {}, 0
  for field in string.gmatch(text, '[^\t]+') do
    n = n + 1
    fields[n] = field
  end
  plan = parse_plan(fields, 0)
  if LIBRARY then
    if n_plan_cache >= PLAN_CACHE_MAX then plan_cache, n_plan_cache = {}, 0 end
    plan_cache[text] = plan
    n_plan_cache = n_plan_cache + 1
  end
  return plan
end

-- A call's list of decisions ("plan cost " each) as plan indexes and costs in turn, parsed
-- once per library load (a batch of one route sends the same text call after call: a pattern
-- match per decision costs more than the rest of reading it). Only short lists are kept, so
-- the cache stays small. A script, which starts afresh every call, reads the text as it goes
-- (and does not make this function).
local LIST_CACHE_MAX, LIST_CACHED_BYTES = 256, 256
local list_cache, n_list_cache = nil, 0
local read_decisions = LIBRARY and function(text)
  local list = list_cache and list_cache[text]
  if list then return list end
  list = {}
  local n = 0
  for plan_text, cost_text in string.gmatch(text, '(%d+) (%d+) ') do
    list[n + 1] = parsed[plan_text] or num(plan_text)
    list[n + 2] = parsed[cost_text] or num(cost_text)
    n = n + 2
  end
  list.n = n
  if #text <= LIST_CACHED_BYTES then
    if list_cache == nil or n_list_cache >= LIST_CACHE_MAX then list_cache, n_list_cache = {}, 0 end
    list_cache[text] = list
    n_list_cache = n_list_cache + 1
  end
  return list
end

-- Block markers, read once per call.
local function block_of(key)
  if blocks == nil then blocks = {} end
  local b = blocks[key]
  if b == nil then
    b = false
    local marker = call('GET', key)
    if marker then
      local name, untl, level = string.match(marker, '^(%S+) (%d+) (%d+)$')
      if level then b = { name = name, untl = untl + 0, level = level + 0 } end
    end
    blocks[key] = b
  end
  return b
end

-- Starts (or raises) the block of one key slot: its n-th block lasts
-- min(block_for * growth^(n-1), block_max).
local function start_block(plan, key, name)
  local b = block_of(key)
  local level = 1
  if b then level = b.level + 1 end
  local ms = floor(plan.block_ms * plan.growth ^ (level - 1))
  if ms > plan.max_ms or ms ~= ms then ms = plan.max_ms end
  local length = ms * 1000
  local untl = now + length
  if not dry then
    call('SET', key, name .. ' ' .. int(untl) .. ' ' .. int(level), 'PX',
      int(ceil(length / 1000) + plan.forget_ms))
  end
  blocks[key] = { name = name, untl = untl, level = level }
  return length, level
end

-- Per limit of the decision: whether its refusal stands only on reservations in flight.
local flight = {}

-- The reply, filled through an explicit length (`#out` searches the table every time).
local function reply(code, retry, level, block_left, plan, v, per_limit)
  out[o + 1], out[o + 2], out[o + 3], out[o + 4] = code, retry, level, block_left
  o = o + 4
  local lstate, alg = plan.lstate, plan.alg
  for i = 1, plan.n do
    out[o + 1], out[o + 2] = alg[lstate[i]].report(v[i])
    local w = per_limit[i] or 0
    if flight[i] then w = -w end
    out[o + 3] = w
    o = o + 3
  end
end

-- Applies the settlements that start at `ARGV[a + 1]` (their keys from `keys[k + 1]` on);
-- returns the index of the first key after theirs.
local function settle(ARGV, a, plans, settlements)
  local k = 0
  for r = 1, settlements do
    -- numbers that repeat (plan, cost, M, limit indexes) are parsed once; the charge's instant
    -- stays text, converted only by an algorithm that reads it (strtod is most of a
    -- settlement's cost otherwise)
    local plan_text, charged_text, m_text = ARGV[a + 1], ARGV[a + 5], ARGV[a + 6]
    local plan = plans[parsed[plan_text] or num(plan_text)]
    local kind, member, at = ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
    local charged = parsed[charged_text] or num(charged_text)
    local m = parsed[m_text] or num(m_text)
    local amount, tag
    if kind == 'r' or kind == 'l' or kind == 'c' or kind == 'x' or kind == 'u' then
      -- untagged (a refund always is): no string to cut
      tag = ''
    elseif string.byte(kind) == 115 then
      -- "s<N>": the charge is settled to N units
      amount = string.sub(kind, 2) + 0
      kind = 's'
    else
      -- "c~<hex>", "x~<hex>": the kind, then the tag of the value the attempt sent
      tag = string.sub(kind, 2)
      kind = string.sub(kind, 1, 1)
    end
    a = a + 6
    for j = 1, m do
      local i_text = ARGV[a + j]
      local i = parsed[i_text] or num(i_text)
      local q = plan.lstate[i]
      local key = keys[k + q]
      -- a limit charged per attempt was charged one unit, whatever the decision's cost
      local cost = charged
      if plan.unit and plan.unit[i] then cost = 1 end
      if kind == 'c' then
        plan.alg[q].confirm(key, plan.names[i], plan.limits[i], plan.windows[i], plan.params[i],
          member, at, cost, tag)
      elseif kind == 'u' then
        plan.alg[q].unanswered(key, plan.names[i], plan.limits[i], plan.windows[i],
          plan.params[i], member, at, cost)
      elseif kind == 's' then
        local to = amount
        if to > plan.limits[i] then to = plan.limits[i] end
        plan.alg[q].settle(key, plan.names[i], plan.limits[i], plan.windows[i], plan.params[i],
          member, at, cost, to, plan.swin[q])
      else
        -- "r" refund, "x" reset (its own charge first), "l" release: a refund of a charge that
        -- may never have been made (its call timed out), taking back only what it finds
        plan.alg[q].refund(key, plan.names[i], plan.limits[i], plan.windows[i], plan.params[i],
          member, at, cost, kind == 'l')
      end
      if kind == 'x' then
        -- a reset: the attempt's own charge went back above; the answered ones (of the value
        -- it sent, when tagged) are forgiven, the reservations still in flight stay; the block
        -- level goes once nothing else is left
        local emptied = plan.alg[q].clear(key, plan.names[i], tag)
        if plan.block_ms > 0 and (tag == '' or emptied) then
          local marker = keys[k + plan.q + plan.sslot[q]]
          call('DEL', marker)
          if blocks == nil then blocks = {} end
          blocks[marker] = false
        end
      end
    end
    a = a + m
    k = k + plan.keys
  end
  return k
end

-- Records a charging refusal in the plan's refusal index (see the top): per key slot, the
-- recording limit with the longest wait, its state key (`keys[k + state]`) naming the key.
local function record_refusal(plan, k, per_limit)
  local index, records, lstate, sslot = plan.index, plan.records, plan.lstate, plan.sslot
  for s = 1, plan.slots do
    local named, longest = nil, 0
    for i = 1, plan.n do
      local w = per_limit[i]
      if w and w > longest and records[i] and sslot[lstate[i]] == s then named, longest = i, w end
    end
    if named then
      local material = string.match(keys[k + lstate[named]], '{[^|]*|([^}]*)}')
      local member, at = plan.names[named] .. '|' .. material, index .. ':at'
      call('HSET', at, member, format('%d', now))
      if call('ZADD', index, format('%d', now + longest), member) == 1 then
        local over = call('ZCARD', index) - MAX_REFUSED
        if over > 0 then
          call('HDEL', at, unpack(call('ZRANGE', index, 0, over - 1)))
          call('ZREMRANGEBYRANK', index, 0, over - 1)
        end
      end
      local ms = ceil(longest / 1000)
      if call('PTTL', index) < ms then call('PEXPIRE', index, format('%d', ms)) end
      if call('PTTL', at) < ms then call('PEXPIRE', at, format('%d', ms)) end
    end
  end
end

-- The index of the limit called `name` that counts key slot `s` of `plan`, if one does.
local function limit_named(plan, s, name)
  local names, lstate, sslot = plan.names, plan.lstate, plan.sslot
  for i = 1, plan.n do
    if names[i] == name and sslot[lstate[i]] == s then return i end
  end
  return nil
end

-- Reused for every decision (a fresh table per decision costs more than clearing one).
local st, v, per_limit, costs = {}, {}, {}, {}

-- One decision of `plan` for `cost` units (`d`: its place in the call), its keys from
-- `keys[k + 1]` on; its answer goes into the reply.
local function decide_one(plan, cost, d, k)
  local commit = cost > 0
  local n, limits, names, windows, lstate, alg = plan.n, plan.limits, plan.names, plan.windows,
    plan.lstate, plan.alg
  -- each limit's cost: the decision's, or one unit for a limit charged per attempt
  local unit = plan.unit
  for i = 1, n do
    if unit and unit[i] and commit then costs[i] = 1 else costs[i] = cost end
  end
  for q = 1, plan.q do st[q] = alg[q].open(keys[k + q], plan.swin[q], plan.sbound[q]) end
  for i = 1, n do
    local q = lstate[i]
    v[i] = alg[q].view(st[q], names[i], limits[i], windows[i], plan.params[i])
    per_limit[i], flight[i] = nil, nil
  end

  -- blocks: the key slot blocked longest (by a limit the plan still has) decides; the level
  -- reported is the highest kept
  local blocked, named, level, markers = nil, 1, 0, k + plan.q
  if plan.block_ms > 0 then
    for s = 1, plan.slots do
      local b = block_of(keys[markers + s])
      if b then
        if b.untl > now and (blocked == nil or b.untl > blocked.untl) then
          local by = limit_named(plan, s, b.name)
          if by then blocked, named = b, by end
        end
        if b.level > level then level = b.level end
      end
    end
  end

  if blocked then
    -- Retry-After is the remaining block time, or a limit's own wait if later: a client that
    -- waits it is allowed, whichever instance answers.
    local retry = blocked.untl - now
    for i = 1, n do
      if not alg[lstate[i]].fits(v[i], limits[i], costs[i]) then
        local w = alg[lstate[i]].wait(v[i], limits[i], costs[i])
        per_limit[i] = w
        if w > retry then retry = w end
      end
    end
    if (per_limit[named] or 0) < blocked.untl - now then per_limit[named] = blocked.untl - now end
    if plan.index and commit and not dry then record_refusal(plan, k, per_limit) end
    reply(2, retry, blocked.level, blocked.untl - now, plan, v, per_limit)
    return
  end
  local retry, worst = 0, 1
  for i = 1, n do
    if not alg[lstate[i]].fits(v[i], limits[i], costs[i]) then
      local w = alg[lstate[i]].wait(v[i], limits[i], costs[i])
      per_limit[i] = w
      if w > retry then retry, worst = w, i end
    end
  end
  if retry > 0 then
    if plan.settling and commit then
      -- A block starts only from answered attempts: a limit whose refusal stands on
      -- reservations still in flight blocks nothing, and its wait is until the soonest of them
      -- is settled (a refund may leave room). Read also where no block follows (the refusal
      -- list's dry run asks a blocking route's windows alone): the wait a client is told.
      local settles = plan.settles
      for i = 1, n do
        local w = per_limit[i]
        if w and settles[i] > 0 then
          local q = lstate[i]
          local f = alg[q].in_flight(v[i], keys[k + q], names[i], limits[i], costs[i], settles[i])
          if f > 0 then
            flight[i] = true
            if f < w then per_limit[i] = f end
          elseif f < 0 then
            -- on attempts kept without an answer: the window's wait, told past `settle`
            flight[i] = true
            per_limit[i] = w + settles[i]
          end
        end
      end
    end
    if plan.block_ms > 0 and commit then
      -- every key slot with a limit refusing on answers is blocked, named by its longest wait
      -- (a limit whose refusal starts no block, such as one on attempts in flight, names none)
      local levels = {}
      local noblock = plan.noblock
      for s = 1, plan.slots do
        local named, longest = nil, 0
        for i = 1, n do
          local w = per_limit[i]
          if w and not flight[i] and plan.sslot[lstate[i]] == s and w > longest
              and not (noblock and noblock[i]) then
            named, longest = i, w
          end
        end
        if named then
          local length, lvl = start_block(plan, keys[markers + s], names[named])
          if length > longest then per_limit[named] = length end
          levels[s] = lvl
        end
      end
      retry, worst = 0, 1
      for i = 1, n do
        local w = per_limit[i]
        if w and w > retry then retry, worst = w, i end
      end
      level = levels[plan.sslot[lstate[worst]]] or level
    end
    if plan.index and commit and not dry then
      -- a refusal on attempts in flight is kept for the window: if they fail, the window
      -- refuses the key that long (the listing checks every entry against the store)
      local kept = {}
      for i = 1, n do
        local w = per_limit[i]
        if w and flight[i] and plan.windows[i] > w then w = plan.windows[i] end
        kept[i] = w
      end
      record_refusal(plan, k, kept)
    end
    reply(0, retry, level, 0, plan, v, per_limit)
    return
  end
  if commit then
    local member = token .. int(d)
    local settles = plan.settles
    for i = 1, n do alg[lstate[i]].charge(v[i], costs[i], member, d, settles[i]) end
  end
  reply(1, 0, level, 0, plan, v, per_limit)
end

-- The call: settlements, then decisions, then every charged state written.
local function decide(KEYS, ARGV)
  begin_call(ARGV)
  token = ARGV[2]
  dry = token == ''
  blocks = nil
  -- a library keeps the algorithms made by earlier calls: their states start afresh
  for code = 1, #MAKE do
    local algorithm = rawget(ALG, code)
    if algorithm then algorithm.begin() end
  end

  local a = 3
  local n_plans = num(ARGV[a])
  for p = 1, n_plans do plans[p] = read_plan(ARGV[a + p]) end
  a = a + n_plans + 1
  local settlements = num(ARGV[a])
  local first_decision
  do
    local b = a
    for r = 1, settlements do
      local m_text = ARGV[b + 6]
      b = b + 6 + (parsed[m_text] or num(m_text))
    end
    first_decision = b + 1
  end

  -- The keys: declared, or (a cross-slot call) after the decisions in ARGV.
  keys = KEYS
  if #KEYS == 0 then
    keys = {}
    local first = first_decision + 1
    for i = first + 1, #ARGV do keys[i - first] = ARGV[i] end
  end

  -- Settlements first, so the decisions of this call see them.
  local k = settle(ARGV, a, plans, settlements)

  out[1], o = now, 1
  local text, d = ARGV[first_decision + 1], 0
  if LIBRARY then
    local list = read_decisions(text)
    for j = 1, list.n, 2 do
      d = d + 1
      local plan = plans[list[j]]
      decide_one(plan, list[j + 1], d, k)
      k = k + plan.keys
    end
  else
    for plan_text, cost_text in string.gmatch(text, '(%d+) (%d+) ') do
      d = d + 1
      local plan = plans[parsed[plan_text] or num(plan_text)]
      decide_one(plan, parsed[cost_text] or num(cost_text), d, k)
      k = k + plan.keys
    end
  end

  if not dry then
    -- only the algorithms used were made (ALG fills on first use)
    for code = 1, #MAKE do
      local algorithm = rawget(ALG, code)
      if algorithm then algorithm.finish() end
    end
  end
  out[o + 1] = nil
  keys, blocks = nil, nil
  return out
end

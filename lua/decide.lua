-- decide.lua: the part every algorithm shares. It is appended after the algorithm's own file
-- (sliding_log.lua or sliding_window_counter.lua, or mixed.lua for a route using both), which
-- defines MEMBERS (whether a charge needs a unique member per request) and the local functions
-- `key_count(n)`, `state_of(key, name, limit, window)` (a limit's state, loaded once per call),
-- `fits(s, limit, cost)`, `wait(s, limit, cost)`, `charge(s, cost, member)`, `report(s)` (units
-- used and the time until the next one comes back) and `finish()` (writes every charged state);
-- together they make one script. The algorithm's file reads `now`, which the prelude (`lua/prelude.lua`) sets
-- before it.
--
-- One call decides many requests ("decisions"), all at one instant `now`, in arrival order:
-- each decision's limits are all charged or none is. A key met again later in the same call
-- (the same client twice, or a hot key) is loaded and trimmed once, its writes are made once
-- at the end, and every decision sees the charges of the decisions before it.
--
-- ARGV[1]   now in microseconds since the epoch, or "" to read the Redis server clock (TIME)
-- ARGV[2]   a token unique to this call (instance id + call sequence, ending in "."); sorted-set
--           members are "<token><decision>" for a request's first unit and
--           "<token><decision>.<unit>" for its others, so they never collide across calls or
--           gateways
-- ARGV[3]   P, the number of limit plans; then per plan:
--             block_ms (0: the route does not block), n (number of limits),
--             n triples: name, limit, window in microseconds
-- then      D, the number of decisions; then per decision: plan index (1-based), cost
--           (cost 0 peeks: reports usage, records nothing, starts no block)
-- KEYS      per decision, in order: its limit keys (sliding_log: one sorted set per limit;
--           sliding_window_counter: one hash for all of them; mixed: one key per limit, its
--           sorted set or the counter hash), then its block marker when the
--           plan's block_ms > 0 (the string "<index of the limit that started it>:<end in µs>").
--           A cluster call that spans slots of one node declares no KEYS (Redis checks declared
--           keys for one slot even under allow-cross-slot-keys) and passes the same list at the
--           end of ARGV instead.
--
-- Reply: { now, then per decision: code, retry_us, used_1, reset_us_1, retry_us_1, ...,
--          used_n, reset_us_n, retry_us_n }
--   code        1 allowed (every limit charged), 0 rejected (nothing charged; a blocking plan
--               starts its block here), 2 the key is serving a block
--   retry_us    0 when allowed; otherwise how long until this request would fit (for a block,
--               the remaining block time; for the exceed that starts one, at least block_for)
--   used_i      units counted in limit i's window after the decision
--   reset_us_i  time until the next unit of limit i comes back (0 when nothing is counted)
--   retry_us_i  time until limit i alone would let this request through (0 when it has room)

local token = ARGV[2]

local plans = {}
local a = 3
for p = 1, ARGV[a] + 0 do
  local plan = { block_ms = ARGV[a + 1] + 0, n = ARGV[a + 2] + 0, names = {}, limits = {}, windows = {} }
  a = a + 2
  for i = 1, plan.n do
    plan.names[i] = ARGV[a + 1]
    plan.limits[i] = ARGV[a + 2] + 0
    plan.windows[i] = ARGV[a + 3] + 0
    a = a + 3
  end
  plan.keys = key_count(plan.n)
  plans[p] = plan
end
a = a + 1
local decisions = ARGV[a] + 0

-- The keys: declared, or (a cross-slot call) after the decisions in ARGV.
local keys = KEYS
if #KEYS == 0 then
  keys = {}
  local first = a + 2 * decisions
  for i = first + 1, #ARGV do keys[i - first] = ARGV[i] end
end

-- Block markers, read once per call.
local blocks = {}
local function block_of(key)
  local b = blocks[key]
  if b == nil then
    b = false
    local marker = call('GET', key)
    if marker then
      local worst, untl = string.match(marker, '^(%d+):(%d+)$')
      if worst then b = { worst = worst + 0, untl = untl + 0 } end
    end
    blocks[key] = b
  end
  return b
end

local function start_block(key, worst, block_ms)
  local untl = now + block_ms * 1000
  call('SET', key, int(worst) .. ':' .. int(untl), 'PX', int(block_ms))
  blocks[key] = { worst = worst, untl = untl }
end

-- The reply, filled through an explicit length (`#out` searches the table every time).
local out, o = { now }, 1
local function reply(code, retry, n, s, per_limit)
  out[o + 1] = code
  out[o + 2] = retry
  o = o + 2
  for i = 1, n do
    out[o + 1], out[o + 2] = report(s[i])
    out[o + 3] = per_limit[i] or 0
    o = o + 3
  end
end

-- Reused for every decision (a fresh table per decision costs more than clearing one).
local s, per_limit = {}, {}
local k = 0
for d = 1, decisions do
  -- `parsed[...] or num(...)`: the cache read inline, a call only for a text not met before
  local plan_text, cost_text = ARGV[a + 1], ARGV[a + 2]
  a = a + 2
  local plan = plans[parsed[plan_text] or num(plan_text)]
  local cost = parsed[cost_text] or num(cost_text)
  local n, limits, names, windows, plan_keys = plan.n, plan.limits, plan.names, plan.windows, plan.keys
  for i = 1, n do
    local key = keys[k + (i < plan_keys and i or plan_keys)]
    s[i] = state_of(key, names[i], limits[i], windows[i])
    per_limit[i] = nil
  end
  k = k + plan_keys
  local block_key
  if plan.block_ms > 0 then
    k = k + 1
    block_key = keys[k]
  end

  local b = block_key and block_of(block_key)
  if b and b.untl > now then
    local remaining = b.untl - now
    per_limit[b.worst] = remaining
    reply(2, remaining, n, s, per_limit)
  else
    local retry, worst = 0, 1
    for i = 1, n do
      if not fits(s[i], limits[i], cost) then
        local w = wait(s[i], limits[i], cost)
        per_limit[i] = w
        if w > retry then retry, worst = w, i end
      end
    end
    if retry > 0 then
      if block_key and cost > 0 then
        start_block(block_key, worst, plan.block_ms)
        if plan.block_ms * 1000 > retry then retry = plan.block_ms * 1000 end
        per_limit[worst] = retry
      end
      reply(0, retry, n, s, per_limit)
    else
      if cost > 0 then
        local member = MEMBERS and format('%s%d', token, d)
        for i = 1, n do charge(s[i], cost, member) end
      end
      reply(1, 0, n, s, per_limit)
    end
  end
end

finish()
return out

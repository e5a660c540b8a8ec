-- concurrency.lua: attempts in flight per key, across every gateway. ONE sorted set per (route,
-- key) holds a lease per attempt admitted and not yet ended: the member is the attempt's
-- member, the score the instant (µs) its lease expires. A lease counts while its expiry is
-- after now; the gateway frees it when the attempt's answer has been sent (a refund removes the
-- member), and a lease whose gateway died (or lost its store) expires on its own `lease`
-- (the limit's window field) after it was taken. The build wraps this file in a scope of its
-- own (see lua/README.md for the whole contract).
--
-- An attempt takes one slot whatever the decision's cost (the plan marks the limit as charged
-- per attempt). No one can foresee when a slot frees (when some answer ends, anywhere), so a
-- full key's wait is 1 s, and its refusal starts no block (the plan marks that too).

-- A full key's wait, and the reset shown while slots are taken (µs).
local WAIT = 1000000

-- The call's sets by key, and in order.
local sets, set_list, n_sets = {}, {}, 0

-- The leases this call's settlements free, by key (the members, and their count in `n`), and
-- the keys in order: each set loses them in one ZREM, before it is counted or at the end.
local freed, freed_keys, n_freed = {}, {}, 0

-- Forgets the previous call's sets and freed leases.
local function begin()
  for i = 1, n_sets do
    sets[set_list[i].key] = nil
    set_list[i] = nil
  end
  n_sets = 0
  for i = 1, n_freed do
    freed[freed_keys[i]] = nil
    freed_keys[i] = nil
  end
  n_freed = 0
end

-- Removes the leases freed in `key`'s set, once.
local function free(key)
  local members = freed[key]
  if members == nil or members.n == 0 then return end
  call('ZREM', key, unpack(members, 1, members.n))
  members.n = 0
end

-- The set of `key` for this call: `n` live leases, the pending ones to add at the end, and the
-- longest lease of the limits sharing it (`window`).
local function open(key, window, bound)
  local st = sets[key]
  if st ~= nil then return st end
  free(key)
  st = { key = key, lease = window, n = call('ZCOUNT', key, '(' .. now_s, '+inf'),
         first = false, rest = false, n_pending = 0, charged = 0 }
  n_sets = n_sets + 1
  set_list[n_sets] = st
  sets[key] = st
  return st
end

local function view(st, name, limit, window, param)
  return st
end

local function used(st)
  return st.n + st.n_pending
end

-- One more attempt fits while fewer than `limit` hold a slot (a read, cost 0, always fits).
local function fits(st, limit, cost)
  if cost > 1 then cost = 1 end
  return used(st) + cost <= limit
end

local function wait(st, limit, cost)
  return WAIT
end

-- Takes a slot for decision `d`, once whatever the number of limits sharing the set.
local function charge(st, cost, member, d)
  if st.charged == d then return end
  st.charged = d
  local n = st.n_pending + 1
  if n == 1 then
    st.first = member
  else
    if not st.rest then st.rest = {} end
    st.rest[n - 1] = member
  end
  st.n_pending = n
end

-- Slots taken, and the wait shown while any is.
local function report(st)
  local u = used(st)
  if u == 0 then return 0, 0 end
  return u, WAIT
end

-- The attempt ended: its slot is free (removed with the set's other freed leases; a release
-- of a lease never taken frees nothing).
local function refund(key, name, limit, window, param, member, at, cost, found_only)
  local members = freed[key]
  if members == nil then
    members = { n = 0 }
    freed[key] = members
    n_freed = n_freed + 1
    freed_keys[n_freed] = key
  end
  members.n = members.n + 1
  members[members.n] = member
end

-- An answered attempt still holds its slot until it is freed.
local function confirm(key, name, limit, window, param, member, at, cost)
end

-- A slot is freed, never kept without an answer.
local function unanswered(key, name, limit, window, param, member, at, cost)
end

-- A slot is no reservation of an outcome (the config allows no count_status here).
local function in_flight(st, key, name, limit, cost, settle)
  return 0
end

-- A slot is not a cost: nothing to settle (the config allows no cost_from here).
local function settle(key, name, limit, window, param, member, at, cost, amount, longest)
end

-- A slot is not an answered count: nothing to forgive.
local function clear(key, name, tag)
end

-- After every decision of the call: freed leases no decision counted leave; in each set
-- charged, expired leases leave, the new ones are written with one ZADD, and the set lives as
-- long as its newest lease.
local zadd_args = {}
local function finish()
  for i = 1, n_freed do free(freed_keys[i]) end
  for i = 1, n_sets do
    local st = set_list[i]
    local n = st.n_pending
    if n > 0 then
      call('ZREMRANGEBYSCORE', st.key, '-inf', now_s)
      local expiry = int(now + st.lease)
      zadd_args[1], zadd_args[2] = expiry, st.first
      for k = 2, n do
        zadd_args[2 * k - 1], zadd_args[2 * k] = expiry, st.rest[k - 1]
      end
      call('ZADD', st.key, unpack(zadd_args, 1, 2 * n))
      call('PEXPIRE', st.key, int(ceil(st.lease / 1000)))
    end
  end
end

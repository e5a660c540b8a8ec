-- mixed.lua: the glue for a route whose limits use both algorithms. The script is the prelude,
-- then each algorithm's file in a scope of its own (as `LOG` and `COUNTER`, tables of its
-- functions), then this file, then `decide.lua`: the limits of one decision are still decided
-- in one call, all charged or none, whatever their algorithms.
--
-- A decision passes one key per limit, in the limits' order: a `sliding_log` limit's sorted set,
-- or, for a `sliding_window_counter` limit, the key's counter hash (the same hash for every
-- counter limit of the key). Which algorithm a limit uses is read from its key: the hash's name
-- ends in "#swc", a sorted set's in ":<limit name>", and limit names cannot hold "#".

-- The log's limits need a unique member per request.
local MEMBERS = true

-- The number of KEYS a decision uses before its block marker: one per limit.
local function key_count(n)
  return n
end

local sub = string.sub

-- A limit's state, from its algorithm's own `state_of`, marked with that algorithm.
local function state_of(key, name, limit, window)
  local algorithm = LOG
  if sub(key, -4) == '#swc' then algorithm = COUNTER end
  local s = algorithm.state_of(key, name, limit, window)
  s.algorithm = algorithm
  return s
end

local function fits(s, limit, cost)
  return s.algorithm.fits(s, limit, cost)
end

local function wait(s, limit, cost)
  return s.algorithm.wait(s, limit, cost)
end

local function charge(s, cost, member)
  s.algorithm.charge(s, cost, member)
end

local function report(s)
  return s.algorithm.report(s)
end

local function finish()
  LOG.finish()
  COUNTER.finish()
end

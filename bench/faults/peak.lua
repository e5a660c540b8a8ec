-- bench/faults/peak.lua: the wrk script of bench/faults/run.sh's peak measurement. Requests
-- alternate between the two routes' paths (/allow/x and /deny/x) and carry an `X-User` header
-- drawn at random among FAULTS_USERS values ("p1" .. "pN": keys of their own, apart from the
-- loaded run's "u1" .. "uN", so the per-key comparison with Redis after the run sees only the
-- run's own requests).
--
--   FAULTS_USERS=4000 wrk -t1 -c32 -d5s -s bench/faults/peak.lua http://127.0.0.1:PORT

local users = tonumber(os.getenv("FAULTS_USERS") or "") or 4000
local counter = 0

-- setup runs once per wrk thread, in the main Lua state: give each thread its own seed.
function setup(thread)
  counter = counter + 1
  thread:set("thread_id", counter)
end

local n = 0

function init(_)
  local id = thread_id or 0
  math.randomseed(os.time() * 1000 + id * 7919 + math.floor((os.clock() * 1e6) % 1000))
end

function request()
  n = n + 1
  local path = (n % 2 == 0) and "/allow/x" or "/deny/x"
  return wrk.format("GET", path, { ["X-User"] = "p" .. math.random(users) })
end

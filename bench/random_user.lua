-- bench/random_user.lua: a wrk script that sends every request with an `X-User` header drawn at
-- random among BENCH_USERS values (100,000 by default): "u1" .. "u100000". Targets keyed by that
-- header (slidegate `key = ["header:X-User"]`, the NGINX + Lua peer) then decide one of 100,000
-- distinct keys per request instead of one hot key. With BENCH_RATE set, requests are paced
-- (bench/wrk_pace.lua).
--
--   wrk -t1 -c32 -d10s --latency -s bench/random_user.lua http://127.0.0.1:PORT/bench

package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
require("wrk_pace").install()

local users = tonumber(os.getenv("BENCH_USERS") or "") or 100000
local counter = 0

-- setup runs once per wrk thread, in the main Lua state: give each thread its own seed.
function setup(thread)
  counter = counter + 1
  thread:set("thread_id", counter)
end

function init(_)
  local id = thread_id or 0
  math.randomseed(os.time() * 1000 + id * 7919 + math.floor((os.clock() * 1e6) % 1000))
end

function request()
  wrk.headers["X-User"] = "u" .. math.random(users)
  return wrk.format()
end

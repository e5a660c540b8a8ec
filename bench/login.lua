-- bench/login.lua: a wrk script of login attempts: an `X-User` header drawn at random among
-- BENCH_USERS values ("u1" ..), and a share BENCH_FAIL_SHARE (0.5 by default) of the attempts
-- sent to `/login?fail=1`, which the demo upstream answers 401 (the others `/login`, 200). For
-- a route whose limit counts only failed logins (`count_status = [401]`): every attempt is
-- reserved, the successful ones refunded. With BENCH_RATE set, requests are paced
-- (bench/wrk_pace.lua).
--
--   wrk -t1 -c32 -d10s --latency -s bench/login.lua http://127.0.0.1:PORT/login

package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
require("wrk_pace").install()

local users = tonumber(os.getenv("BENCH_USERS") or "") or 100000
local fail_share = tonumber(os.getenv("BENCH_FAIL_SHARE") or "") or 0.5
local counter = 0

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
  local path = "/login"
  if math.random() < fail_share then path = "/login?fail=1" end
  return wrk.format(nil, path)
end

-- bench/otp_body.lua: a wrk script that POSTs an OTP request: a JSON body of exactly 200 bytes
-- whose `phone` member is drawn at random among BENCH_PHONES numbers (100,000 by default,
-- "+6281200000001" ..), for a route keyed on `json:phone`: every request makes the gateway read
-- and parse a body to find its key, one of 100,000 distinct keys. With BENCH_RATE set, requests
-- are paced (bench/wrk_pace.lua).
--
--   wrk -t1 -c32 -d10s --latency -s bench/otp_body.lua http://127.0.0.1:PORT/otp/send

package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
require("wrk_pace").install()

local phones = tonumber(os.getenv("BENCH_PHONES") or "") or 100000
local BODY_BYTES = 200
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("thread_id", counter)
end

function init(_)
  local id = thread_id or 0
  math.randomseed(os.time() * 1000 + id * 7919 + math.floor((os.clock() * 1e6) % 1000))
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

-- {"phone":"+62812NNNNNNNN","channel":"sms",...,"pad":"xxx"}: padded to BODY_BYTES exactly.
local function body(n)
  local head = string.format('{"phone":"+62812%08d","channel":"sms","locale":"id-ID",' ..
    '"app":"slidegate-bench","purpose":"login","pad":"', n)
  return head .. string.rep("x", BODY_BYTES - #head - 2) .. '"}'
end

function request()
  return wrk.format(nil, nil, nil, body(math.random(phones)))
end

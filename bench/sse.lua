-- bench/sse.lua: a wrk script that asks the demo upstream for a streamed answer: /sse, 20
-- server-sent events like an OpenAI-compatible API's with stream_options.include_usage, the last
-- but one stating usage.total_tokens (25; bench/rows.py counts on it). With BENCH_RATE set,
-- requests are paced (bench/wrk_pace.lua).
--
--   wrk -t1 -c32 -d10s --latency -s bench/sse.lua http://127.0.0.1:PORT/

package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
require("wrk_pace").install()

local path = "/sse?events=20"

function request()
  return wrk.format("GET", path)
end

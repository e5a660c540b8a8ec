-- bench/wrk_pace.lua: optional pacing for the wrk scripts of bench/, a module they load with
--   package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
--   require("wrk_pace").install()
-- With BENCH_RATE set (requests per second, all wrk threads together; BENCH_THREADS is wrk's
-- -t), every wrk thread sends its requests on a schedule of BENCH_RATE / BENCH_THREADS per
-- second, through wrk's delay() hook: before each request, the time until that request's slot,
-- rounded to wrk's millisecond timer. That is hey's -q for targets whose every request must
-- differ (a random header or body), so their p99 at half load is measured like hey's.
-- Without BENCH_RATE nothing is installed and wrk runs flat out (no timer per request).

local M = {}

function M.install()
  local rate = tonumber(os.getenv("BENCH_RATE") or "")
  if not rate or rate <= 0 then return false end
  local threads = tonumber(os.getenv("BENCH_THREADS") or "") or 1
  local per_thread = rate / threads
  -- A monotonic clock in seconds: LuaJIT's ffi (wrk embeds LuaJIT).
  local ok, ffi = pcall(require, "ffi")
  if not ok then error("bench/wrk_pace.lua: pacing needs wrk built with LuaJIT (ffi)") end
  pcall(ffi.cdef, [[
    typedef struct { long tv_sec; long tv_nsec; } bench_pace_timespec;
    int clock_gettime(int clock_id, bench_pace_timespec *tp);
  ]])
  local ts = ffi.new("bench_pace_timespec")
  local CLOCK_MONOTONIC = 1
  local function now()
    ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
    return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
  end
  local start, sent = nil, 0
  -- wrk calls the global delay() before every request after a connection's first, and waits
  -- the milliseconds it returns.
  function delay()
    local t = now()
    start = start or t
    sent = sent + 1
    local ms = (start + sent / per_thread - t) * 1000
    if ms <= 0.5 then return 0 end
    return math.floor(ms + 0.5)
  end
  return true
end

return M

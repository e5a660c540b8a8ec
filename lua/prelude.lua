-- prelude.lua: the first piece of every script: the instant of the whole call.
-- ARGV[1] is now in microseconds since the epoch, or "" to read the Redis server clock (TIME),
-- so gateway instances with skewed clocks still agree (store.clock = "redis", the default).
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end

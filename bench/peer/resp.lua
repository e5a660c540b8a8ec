-- bench/peer/resp.lua: a minimal Redis (RESP2) client over ngx_lua cosockets, for the
-- benchmark peer. lua-resty-redis is not packaged in Debian, and the point of the peer is what a
-- team writes by hand anyway: one command, one reply, connections reused from a keepalive pool.
--
--   local resp = require "resp"
--   local conn, err = resp.connect(host, port, pool_size, timeout_ms)
--   local reply, err = conn:call("EVALSHA", sha, 1, key, ...)
--   conn:release()                       -- back to the pool (or conn:close() after an error)
--
-- Replies: status and bulk strings are Lua strings, integers numbers, arrays tables, nil bulk or
-- array ngx.null. A Redis error reply returns false, "<message>" (the connection stays usable);
-- an I/O or protocol error returns nil, "<message>" (close the connection).

local tcp = ngx.socket.tcp
local null = ngx.null
local byte, sub, tonumber, tostring = string.byte, string.sub, tonumber, tostring
local setmetatable = setmetatable

local M = {}
local Conn = {}
Conn.__index = Conn

local PLUS, MINUS, COLON, DOLLAR, STAR = byte("+"), byte("-"), byte(":"), byte("$"), byte("*")

--- Connects (or takes a pooled connection) to host:port.
function M.connect(host, port, pool_size, timeout_ms)
  local sock = tcp()
  sock:settimeout(timeout_ms or 1000)
  local ok, err = sock:connect(host, port, { pool_size = pool_size })
  if not ok then
    return nil, "connect: " .. tostring(err)
  end
  return setmetatable({ sock = sock, pool_size = pool_size }, Conn)
end

-- read_reply(sock): one reply, recursively for arrays.
local function read_reply(sock)
  local line, err = sock:receive("*l") -- the line without its CRLF
  if not line then
    return nil, "receive: " .. tostring(err)
  end
  local kind = byte(line)
  if kind == COLON then
    return tonumber(sub(line, 2))
  elseif kind == STAR then
    local n = tonumber(sub(line, 2))
    if not n then
      return nil, "bad array header: " .. line
    end
    if n < 0 then
      return null
    end
    local out = {}
    for i = 1, n do
      local v, e = read_reply(sock)
      if v == nil then
        return nil, e
      end
      if v == false then
        v = { err = e } -- an error inside an array (EXEC); kept, not raised
      end
      out[i] = v
    end
    return out
  elseif kind == DOLLAR then
    local n = tonumber(sub(line, 2))
    if not n then
      return nil, "bad bulk header: " .. line
    end
    if n < 0 then
      return null
    end
    local data, e = sock:receive(n + 2)
    if not data then
      return nil, "receive: " .. tostring(e)
    end
    return sub(data, 1, n)
  elseif kind == PLUS then
    return sub(line, 2)
  elseif kind == MINUS then
    return false, sub(line, 2)
  end
  return nil, "unexpected reply: " .. line
end

--- Sends one command (its arguments are turned into strings) and reads its reply.
function Conn:call(...)
  local n = select("#", ...)
  local buf = { "*", n, "\r\n" }
  for i = 1, n do
    local a = tostring((select(i, ...)))
    buf[#buf + 1] = "$"
    buf[#buf + 1] = #a
    buf[#buf + 1] = "\r\n"
    buf[#buf + 1] = a
    buf[#buf + 1] = "\r\n"
  end
  local sent, err = self.sock:send(buf) -- cosockets take a table of fragments: no concat
  if not sent then
    return nil, "send: " .. tostring(err)
  end
  return read_reply(self.sock)
end

--- Returns the connection to the keepalive pool.
function Conn:release()
  local ok, err = self.sock:setkeepalive(60000, self.pool_size)
  if not ok then
    self.sock:close()
    return nil, err
  end
  return true
end

--- Closes the connection (after an I/O error its state is unknown).
function Conn:close()
  self.sock:close()
end

return M

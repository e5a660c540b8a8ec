"""The private Redis of a run: starting it (and a replica), and a minimal RESP client.

The client opens one connection per command: the bench asks Redis a handful of things before
and after each measured run (INFO commandstats, SCRIPT LOAD, a read-only SCAN + ZCARD loop),
never during one.
"""

from __future__ import annotations

import socket
import time
from typing import Tuple

from .log import die, log
from .procs import wait_port

# Sums ZCARD over every sorted set matching ARGV[1] in one server-side SCAN loop (read-only;
# run after the load). Keys of other types under the same prefix (block markers, anything a
# later script layout adds) are skipped.
ZCARD_SUM_LUA = """local c, n, s = "0", 0, 0
repeat
  local r = redis.call("SCAN", c, "MATCH", ARGV[1], "COUNT", 1000)
  c = r[1]
  for _, k in ipairs(r[2]) do
    if redis.call("TYPE", k).ok == "zset" then n = n + 1; s = s + redis.call("ZCARD", k) end
  end
until c == "0"
return {n, s}"""


class RedisError(Exception):
    """An error reply from Redis."""


class Redis:
    """A RESP2 client for one Redis on 127.0.0.1."""

    def __init__(self, port: int):
        self.port = port

    def call(self, *args):
        """Sends one command, returns its reply (str, int, list or None); raises on an error reply."""
        request = b"*%d\r\n" % len(args)
        for a in args:
            data = a if isinstance(a, bytes) else str(a).encode()
            request += b"$%d\r\n%s\r\n" % (len(data), data)
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            s.sendall(request)
            with s.makefile("rb") as f:
                return _reply(f)

    def info(self, section: str) -> dict:
        """INFO `section` as a dict of its `name:value` lines."""
        out = {}
        for line in self.call("INFO", section).splitlines():
            if ":" in line and not line.startswith("#"):
                name, value = line.split(":", 1)
                out[name] = value
        return out

    def decision_calls(self) -> Tuple[int, int]:
        """(calls, failed calls) of EVALSHA and FCALL together so far (INFO commandstats):
        slidegate uses FCALL on a server with Functions, the peer and redis-benchmark EVALSHA."""
        calls = failed = 0
        for name, value in self.info("commandstats").items():
            if name in ("cmdstat_evalsha", "cmdstat_fcall"):
                stats = dict(kv.split("=", 1) for kv in value.split(","))
                calls += int(stats.get("calls", 0))
                failed += int(stats.get("failed_calls", 0))
        return calls, failed

    def zcard_sum(self, pattern: str) -> Tuple[int, int]:
        """(sorted sets, entries): ZCARD summed over every sorted set matching `pattern`."""
        try:
            keys, entries = self.call("EVAL", ZCARD_SUM_LUA, 0, pattern)
        except (RedisError, OSError, ValueError) as e:
            die(f"summing ZCARD over {pattern} in Redis failed: {e}")
        return int(keys), int(entries)


def _reply(f):
    line = f.readline()
    if not line.endswith(b"\r\n"):
        raise OSError("connection closed by Redis")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RedisError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2].decode()
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_reply(f) for _ in range(n)]
    raise OSError(f"unexpected reply from Redis: {line!r}")


def start_redis(ctx, replica: bool) -> Redis:
    """Starts the run's redis-server (no persistence), and a replica of it when asked."""
    port = ctx.ports.pick()
    log(f"starting redis-server on 127.0.0.1:{port}")
    proc = ctx.sup.service("redis", _server_argv(port, ctx.tmp))
    ctx.cpu.add("redis", [proc.pid])
    redis = Redis(port)
    _wait_until("redis-server did not answer within 30s", proc, "redis-server", lambda: redis.call("PING") == "PONG")
    if replica:
        # A replica for store.replica_acks to wait for (its CPU is not in the Redis column).
        rport = ctx.ports.pick()
        (ctx.tmp / "replica").mkdir()
        log(f"starting a replica of it on 127.0.0.1:{rport} (replica_acks)")
        argv = _server_argv(rport, ctx.tmp / "replica") + ["--replicaof", "127.0.0.1", str(port)]
        rproc = ctx.sup.service("replica", argv)
        wait_port("the replica", rport, rproc)
        _wait_until("the replica did not sync within 30s", rproc, "the replica",
                    lambda: Redis(rport).info("replication").get("master_link_status") == "up")
    return redis


def _server_argv(port: int, data_dir) -> list:
    return ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--daemonize", "no", "--dir", str(data_dir)]


def _wait_until(message: str, proc, name: str, ready) -> None:
    for _ in range(150):
        if proc.poll() is not None:
            die(f"{name} exited during startup")
        try:
            if ready():
                return
        except (OSError, RedisError):
            pass
        time.sleep(0.2)
    die(message)

"""Processes: services in the background, load generators in the foreground, ports, readiness.

Every process the bench starts goes through the `Supervisor`, which stops them all in reverse
order on the way out (normal end, failure or Ctrl-C). Services run in their own process group,
so a Ctrl-C reaches the bench and the load generator and the bench stops the services itself;
they stay in the bench's session: with the kernel's autogroup scheduling, a session of its own
would give each service an equal share of the CPU as a group (not per thread), which halved
the rates of the Redis rows on a 2-core machine.
CPU accounting lives here too: `/proc/PID/stat` of a process group, and the load generator's
CPU as the children this process has reaped (`getrusage(RUSAGE_CHILDREN)`).
"""

from __future__ import annotations

import os
import random
import resource
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from .log import die

CLK_TCK = os.sysconf("SC_CLK_TCK")


class Supervisor:
    """Starts processes, logs their output under `logs`, and stops them all in `stop_all`."""

    def __init__(self, logs: Path):
        self.logs = logs
        self.services: List[subprocess.Popen] = []
        self.foreground: List[subprocess.Popen] = []

    def service(self, name: str, argv: Sequence[str], env: Optional[Dict[str, str]] = None):
        """Starts a long-running service in the background, its output into `<logs>/<name>.log`."""
        with open(self.logs / f"{name}.log", "wb") as out:
            proc = subprocess.Popen(
                list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, preexec_fn=os.setpgrp,
            )
        self.services.append(proc)
        return proc

    def spawn(self, argv: Sequence[str], out: Path, env: Optional[Dict[str, str]] = None):
        """Starts a load generator (or a client beside one), its output into `out`."""
        with open(out, "wb") as f:
            proc = subprocess.Popen(
                list(argv), stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
        self.foreground.append(proc)
        return proc

    def finish(self, proc: subprocess.Popen, out: Path, timeout: float, what: str) -> None:
        """Waits for a spawned process (bounded); a failure shows its output and ends the run."""
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = None
        self.foreground.remove(proc)
        if rc != 0:
            show_tail(out)
            die(f"{what} failed" + (f" (exit {rc})" if rc is not None else f" (no end within {timeout:.0f} s)"))

    def run(self, argv: Sequence[str], out: Path, timeout: float, what: str,
            env: Optional[Dict[str, str]] = None) -> None:
        """Runs a load generator to its end (bounded by `timeout` seconds)."""
        self.finish(self.spawn(argv, out, env), out, timeout, what)

    def stop_all(self) -> None:
        """Stops the running foreground processes, then the services in reverse order."""
        order = list(reversed(self.foreground)) + list(reversed(self.services))
        for proc in order:
            if proc.poll() is None:
                try:
                    proc.terminate()
                except ProcessLookupError:
                    pass
        for proc in order:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.foreground.clear()
        self.services.clear()

    def tail_logs(self) -> None:
        """Shows the tail of every service log (to explain a failure)."""
        for path in sorted(self.logs.glob("*.log")):
            if path.stat().st_size:
                print(f"[bench] --- {path.name} (tail) ---", file=sys.stderr)
                show_tail(path)


def show_tail(path: Path, lines: int = 20) -> None:
    """The last `lines` lines of a file on stderr."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return
    for line in text[-lines:]:
        print(line, file=sys.stderr)


class Ports:
    """Free loopback ports outside the kernel's ephemeral range.

    Outgoing connections (wrk, the Redis clients) may hold any ephemeral port, which would fail
    a later bind, so candidates lie below the ephemeral range (else above it).
    """

    def __init__(self):
        try:
            lo, hi = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        except (OSError, ValueError):
            lo, hi = 32768, 60999
        self.lo, self.hi = (10000, lo - 1) if lo >= 11024 else (hi + 1, 65535)
        if self.hi - self.lo < 100:
            self.lo, self.hi = 1024, 65535
        self.taken: set = set()

    def pick(self) -> int:
        """A port nothing is bound to, never handed out twice in one run."""
        port = random.randint(self.lo, self.hi)
        for _ in range(500):
            port = self.lo if port > self.hi else port
            if port not in self.taken and _bindable(port):
                self.taken.add(port)
                return port
            port += 1
        die("no free loopback port found")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _alive(proc: subprocess.Popen, name: str) -> None:
    if proc.poll() is not None:
        die(f"{name} exited during startup")


def wait_http(name: str, url: str, proc: subprocess.Popen) -> None:
    """Bounded retry (30 s) until `url` answers 2xx and `proc` is still alive."""
    for _ in range(150):
        _alive(proc, name)
        try:
            with urllib.request.urlopen(url, timeout=1) as reply:
                if 200 <= reply.status < 300:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    die(f"{name} did not answer at {url} within 30s")


def wait_port(name: str, port: int, proc: subprocess.Popen) -> None:
    """Bounded retry (30 s) until something accepts on 127.0.0.1:`port`."""
    for _ in range(150):
        _alive(proc, name)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    die(f"{name} did not listen on 127.0.0.1:{port} within 30s")


def children_of(pid: int) -> List[int]:
    """The direct children of `pid` (an NGINX master's workers)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


class CpuGroups:
    """Named groups of processes whose CPU time (all threads, user + system) is read together."""

    def __init__(self):
        self.groups: Dict[str, List[int]] = {}

    def add(self, name: str, pids: List[int]) -> None:
        self.groups[name] = pids

    def has(self, name: Optional[str]) -> bool:
        return name is not None and name in self.groups

    def snapshot(self) -> Dict[str, int]:
        """Clock ticks (utime + stime, fields 14 and 15 of /proc/PID/stat) of every group."""
        return {name: sum(_ticks(pid) for pid in pids) for name, pids in self.groups.items()}


def _ticks(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = stat.rsplit(")", 1)[1].split()  # the command name may hold spaces
    return int(fields[11]) + int(fields[12])


def children_cpu_s() -> float:
    """CPU seconds of every child reaped so far, with their reaped descendants."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime

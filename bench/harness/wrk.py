"""The wrk load: HTTP/1.1 keep-alive connections, plain GETs or a row's own Lua script.

A row's script (bench/random_user.lua, otp_body.lua, login.lua) varies the key per request;
with `leavers`, BENCH_LEAVERS of the BENCH_CONNS clients are bench/leaver.py beside wrk,
clients that close their socket before the answer. Warm-up, then a measured run inside a
`Window`; CPU per attempt counts the attempts that left too.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Optional, Tuple

from . import tools
from .load import Load
from .log import die
from .row import ALL_2XX, ONE_2XX
from .window import Window


def parse_wrk(path: Path) -> Optional[dict]:
    """rps, p50/p99 (ms), non-2xx, socket errors and completed requests of a `--latency` run."""
    text = path.read_text(errors="replace")
    rps = re.search(r"^Requests/sec:\s+([0-9.]+)", text, re.M)
    p50 = re.search(r"^\s+50%\s+(\S+)", text, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", text, re.M)
    if not (rps and p50 and p99):
        return None
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    done, non2xx = wrk_counts(path)
    return {
        "rps": float(rps.group(1)),
        "p50": _ms(p50.group(1)),
        "p99": _ms(p99.group(1)),
        "non2xx": non2xx,
        "sockerr": sum(int(x) for x in errors.groups()) if errors else 0,
        "done": done,
    }


def wrk_counts(path: Path) -> Tuple[int, int]:
    """(completed, non-2xx) of any wrk run (warm-ups run without --latency)."""
    text = path.read_text(errors="replace")
    done = re.search(r"^\s*(\d+) requests in ", text, re.M)
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    return (int(done.group(1)) if done else 0), (int(non2xx.group(1)) if non2xx else 0)


def _ms(value: str) -> float:
    number = re.match(r"[0-9.]+", value)
    unit = value[number.end():]
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}.get(unit)
    if scale is None:
        die(f"unknown wrk latency unit in {value!r}")
    return round(float(number.group(0)) * scale, 3)


class Wrk(Load):
    """Load with wrk: `script` (in bench/) varies each request; `leavers` adds clients that
    leave; `conns` replaces BENCH_CONNS for this row (peak and paced runs, and the checks'
    in-flight slack)."""

    group = "wrk"
    needs = (tools.command("wrk", "wrk"),)

    def __init__(self, script: Optional[str] = None, leavers: bool = False, conns: Optional[int] = None):
        self.script = script
        self.leavers = leavers
        self.conns = conns

    def connections(self, k) -> int:
        return self.conns or k.conns

    @staticmethod
    def describe(ctx, rows) -> str:
        k = ctx.k
        return (f"load: wrk -t{k.threads} -c{k.conns} -d{k.seconds}s --latency (warm-up {k.warmup}s), "
                f"{k.rounds} round(s), targets: {' '.join(r.name for r in rows)}")

    def url(self, ctx, row) -> str:
        return f"http://127.0.0.1:{ctx.listen[row.name]['http']}{ctx.k.path}"

    def argv(self, ctx, row, seconds: int, latency: bool) -> list:
        """The wrk command line (the leaving clients take their share of the connections)."""
        k = ctx.k
        conns = self.connections(k) - (k.leavers if self.leavers else 0)
        argv = ["wrk", f"-t{k.threads}", f"-c{conns}", f"-d{seconds}s"]
        argv += ["--latency"] if latency else []
        argv += ["-s", str(ctx.root / "bench" / self.script)] if self.script else []
        return argv + [self.url(ctx, row)]

    def run(self, ctx, row, seconds: int, out: Path, latency: bool, rate: Optional[int] = None) -> Tuple[int, int]:
        """One wrk run (with the leaving clients beside it); returns (attempts left, answered first)."""
        leaver = None
        if self.leavers:
            leaver_out = out.with_suffix(".leavers.txt")
            leaver = ctx.sup.spawn(
                [sys.executable, str(ctx.root / "bench" / "leaver.py"), "127.0.0.1",
                 str(ctx.listen[row.name]["http"]), str(ctx.k.leavers), str(seconds), str(ctx.k.users),
                 str(ctx.k.leave_ms)], leaver_out)
        ctx.sup.run(self.argv(ctx, row, seconds, latency), out, seconds + 30, f"wrk against {row.name}",
                    ctx.script_env(rate))
        if leaver is None:
            return 0, 0
        ctx.sup.finish(leaver, leaver_out, 30, "bench/leaver.py")
        report = re.search(r"^attempts=(\d+) answered_first=(\d+)$", leaver_out.read_text(), re.M)
        if not report:
            die(f"bench/leaver.py: no report in {leaver_out}")
        return int(report.group(1)), int(report.group(2))

    def measure(self, ctx, row, r: int) -> dict:
        """A warm-up, then one measured run: the row's figures for round `r`."""
        k, tot = ctx.k, ctx.tot[row.name]
        if k.warmup > 0:
            out = ctx.tmp / f"warmup-{row.name}-{r}.txt"
            left, first = self.run(ctx, row, k.warmup, out, latency=False)
            done, non2xx = wrk_counts(out)
            tot.update(completed=done, ok2xx=done - non2xx, runs=1, left=left, left_first=first)
        out = ctx.tmp / f"wrk-{row.name}-{r}.txt"
        with Window(ctx, row) as w:
            left, first = self.run(ctx, row, k.seconds, out, latency=True)
        fig = parse_wrk(out) or die(f"could not parse wrk output for {row.name} round {r}")
        tot.update(completed=fig["done"], ok2xx=fig["done"] - fig["non2xx"], runs=1, left=left, left_first=first)
        decisions = row.front.decisions(w, fig["done"]) if row.front.uses_redis else 0
        # CPU per attempt: the ones that left cost the gateway too.
        fig.update(w.figures(fig["done"] + left, decisions), left=left)
        fig["client"] = w.client_us(fig["done"])
        return fig

    def verify(self, ctx, row, v) -> None:
        """The answers: requests completed, 2xx as the row expects; the line the checks extend."""
        tot = ctx.tot[row.name]
        completed, ok2xx = tot["completed"], tot["ok2xx"]
        sockerr = sum(run.get("sockerr", 0) for run in ctx.runs[row.name].values())
        if completed <= 0:
            v.fail(f"{row.name}: no completed requests")
        if row.answers == ONE_2XX and ok2xx > 1:
            v.fail(f"{row.name}: {ok2xx} requests answered 2xx; the limit allows 1 per hour")
        elif row.answers == ALL_2XX and ok2xx != completed:
            v.fail(f"{row.name}: {completed - ok2xx} non-2xx responses")
        v.say(f"{row.name}: {completed} requests, {ok2xx} 2xx, {sockerr} socket errors in measured runs")

    def info_note(self, ctx, row) -> str:
        if self.leavers:
            return f"; plus {ctx.tot[row.name]['left']} attempts that left, all runs"
        return ""

    def rate_label(self) -> str:
        return "req/s of wrk's clients" if self.leavers else "req/s"

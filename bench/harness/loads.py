"""The loads that are not wrk: the batch API client, redis-benchmark, and gRPC call generators.

The batch client (bench/batch_client.py) and the gRPC generators (bench/rls/load.rs, built as
a cargo example) print one line of `name=value` pairs: decisions, dps, p50_ms, p99_ms, allowed,
denied, errors. Their rate is decisions/s and their CPU is per decision. redis-benchmark runs a
number of commands, not a time: a calibration run (its first warm-up) sizes the measured runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import tools
from .fronts import PEER_LIMIT
from .load import Load
from .log import die
from .numbers import MISSING
from .redis import RedisError
from .window import Window


def key_values(path: Path) -> dict:
    """The `name=value` pairs of the first line of a load generator's output."""
    lines = path.read_text(errors="replace").splitlines()
    return dict(kv.split("=", 1) for kv in (lines[0].split() if lines else []) if "=" in kv)


class DecisionLoad(Load):
    """A generator that reports its decisions itself (one `name=value` line); subclasses give
    its command line, `group` (rows of one group alternate within a round) and `what`."""

    unit = "decisions/s"
    refused = "denied"  # how the verification line names a decision that said no
    failed = "with a store error"

    def argv(self, ctx, row, seconds: int, rate=None) -> list:
        raise NotImplementedError

    def env(self, ctx):
        return None

    def run(self, ctx, row, seconds: int, out: Path, rate=None) -> dict:
        """One run; adds its allowed/denied/errors to the row's totals; returns its line."""
        ctx.sup.run(self.argv(ctx, row, seconds, rate), out, seconds + 60, f"the {row.name} load generator",
                    self.env(ctx))
        kv = key_values(out)
        tot = ctx.tot[row.name]
        tot.update(allowed=int(kv.get("allowed", 0)), denied=int(kv.get("denied", 0)),
                   errors=int(kv.get("errors", 0)))
        return kv

    def measure(self, ctx, row, r: int) -> dict:
        k = ctx.k
        if k.warmup > 0:
            self.run(ctx, row, k.warmup, ctx.tmp / f"{row.name}-warmup-{r}.txt")
        out = ctx.tmp / f"{row.name}-{r}.txt"
        with Window(ctx, row) as w:
            kv = self.run(ctx, row, k.seconds, out)
        n = int(kv.get("decisions", 0))
        if "dps" not in kv or n <= 0:
            die(f"no decisions from the {row.name} load generator")
        fig = {"rps": float(kv["dps"]), "p50": float(kv["p50_ms"]), "p99": float(kv["p99_ms"]), "done": n}
        fig.update(w.figures(n, n), upstream=MISSING)
        return fig

    def verify(self, ctx, row, v) -> None:
        tot = ctx.tot[row.name]
        allowed, denied, errors = tot["allowed"], tot["denied"], tot["errors"]
        if allowed <= 0:
            v.fail(f"{row.name}: no decision allowed")
        if denied or errors:
            v.fail(f"{row.name}: {denied} {self.refused} and {errors} failed decisions under a limit never reached")
        v.say(f"{row.name}: {allowed} decisions allowed, {denied} {self.refused}, {errors} {self.failed}")


class Batch(DecisionLoad):
    """slidegate's POST /v1/decisions on the admin listener: bench/batch_client.py posting
    prepared bodies of BENCH_BATCH_KEYS distinct keys over BENCH_BATCH_CONNS connections."""

    group = "batch"

    @staticmethod
    def describe(ctx, rows) -> str:
        k = ctx.k
        return (f"batch: POST /v1/decisions ({k.batch_keys} keys per call, {k.batch_conns} connection(s)) vs "
                f"redis-benchmark -P {k.rb_pipeline} -c {k.rb_clients}, {k.seconds}s, {k.rounds} round(s)")

    def argv(self, ctx, row, seconds: int, rate=None) -> list:
        k = ctx.k
        return [sys.executable, str(ctx.root / "bench" / "batch_client.py"), "127.0.0.1",
                str(ctx.listen[row.name]["admin"]), row.route_name, str(seconds), "--conns", str(k.batch_conns),
                "--keys", str(k.batch_keys), "--bodies", str(k.batch_bodies), "--prefix", "u"]

    def env(self, ctx):
        return ctx.script_env(extra={"BENCH_ADMIN_TOKEN": ctx.token})

    def connections(self, k) -> int:
        return k.batch_conns


class Calls(DecisionLoad):
    """A gRPC call generator built from bench/ as a cargo example (bench/rls/load.rs is
    `rls_load`): BENCH_RLS_CONNS HTTP/2 connections with BENCH_RLS_IN_FLIGHT calls in flight on
    each, to the row's `listener`, each call keyed by one of BENCH_USERS keys: one descriptor
    (`service="rls"`), or a Check with a JSON body keyed by phone (`service="check"`)."""

    group = "calls"
    refused = "refused"
    failed = "failed calls"

    def __init__(self, example: str, source: str, listener: str, what: str, service: str = "rls"):
        self.example = example  # the cargo example's name
        self.source = source  # its source file, for the report
        self.listener = listener  # the gateway's listener it calls (gateway.py's services)
        self.what = what  # the calls it makes, for the log
        self.service = service  # the generator's --service: rls or check
        self.cargo_examples = (example,)

    @staticmethod
    def describe(ctx, rows) -> str:
        k = ctx.k
        what = ", ".join(f"{r.name}: {r.load.what}" for r in rows)
        return (f"{what}, {k.users} keys, {k.rls_conns} connection(s) x "
                f"{k.rls_in_flight} in flight, {k.seconds}s, {k.rounds} round(s)")

    def argv(self, ctx, row, seconds: int, rate=None) -> list:
        k = ctx.k
        argv = [str(ctx.root / "target" / "release" / "examples" / self.example),
                f"127.0.0.1:{ctx.listen[row.name][self.listener]}", str(seconds), "--keys", str(k.users),
                "--service", self.service, "--conns", str(k.rls_conns), "--in-flight", str(k.rls_in_flight)]
        return argv + (["--rate", str(rate)] if rate else [])

    def connections(self, k) -> int:
        return k.rls_conns * k.rls_in_flight


class RedisBenchmark(Load):
    """`redis-benchmark -P BENCH_RB_PIPELINE` running EVALSHA of the peer's hand-made script with
    two limits (a day, a week, never reached) on distinct keys, straight into the same Redis."""

    group = "batch"
    unit = "decisions/s"
    uses_redis = True
    needs = (tools.command("redis-benchmark"),)

    def __init__(self):
        self.sha = None
        self.requests = 0  # per measured run, from the calibration

    describe = Batch.describe

    def _argv(self, ctx, n: int) -> list:
        k = ctx.k
        # The options, then the command: anything after EVALSHA is an argument of the script.
        return ["redis-benchmark", "-h", "127.0.0.1", "-p", str(ctx.redis.port), "-c", str(k.rb_clients),
                "-P", str(k.rb_pipeline), "-r", str(k.batch_bodies * k.batch_keys), "--csv", "-n", str(n),
                "EVALSHA", self.sha, "3", "rb:{__rand_int__}:day", "rb:{__rand_int__}:week",
                "rb:{__rand_int__}#block", "", "1", "0", "t__rand_int__-__rand_int__", str(PEER_LIMIT),
                "86400000000", str(PEER_LIMIT), "604800000000"]

    @staticmethod
    def _csv(path: Path):
        # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms",...
        lines = path.read_text(errors="replace").splitlines()
        if len(lines) < 2:
            return None
        cols = lines[1].strip('"').split('","')
        return float(cols[1]), float(cols[4]), float(cols[6])

    def measure(self, ctx, row, r: int) -> dict:
        k = ctx.k
        if self.sha is None:
            try:
                self.sha = ctx.redis.call("SCRIPT", "LOAD", (ctx.root / "bench/peer/sliding_log.lua").read_bytes())
            except (RedisError, OSError) as e:
                die(f"SCRIPT LOAD of bench/peer/sliding_log.lua failed: {e}")
            # A calibration run (the warm-up) sizes the measured runs to about BENCH_SECONDS.
            out = ctx.tmp / "rb-calibrate.csv"
            ctx.sup.run(self._argv(ctx, 20000), out, 120, "redis-benchmark calibration")
            rps = (self._csv(out) or (0,))[0]
            self.requests = max(20000, int(rps * k.seconds))
        elif k.warmup > 0:
            ctx.sup.run(self._argv(ctx, self.requests * k.warmup // k.seconds + 1), ctx.tmp / f"rb-warmup-{r}.csv",
                        k.warmup * 10 + 60, "redis-benchmark warm-up")
        out = ctx.tmp / f"rb-{r}.csv"
        with Window(ctx, row) as w:
            ctx.sup.run(self._argv(ctx, self.requests), out, k.seconds * 10 + 120, "redis-benchmark")
        parsed = self._csv(out) or die("could not parse redis-benchmark output")
        # One EVALSHA is one decision; Redis counts them exactly (redis-benchmark may round -n
        # up to whole pipelines).
        n = w.calls
        if n <= 0:
            die("redis-benchmark ran no EVALSHA")
        fig = {"rps": parsed[0], "p50": parsed[1], "p99": parsed[2], "done": n}
        fig.update(w.figures(n, n), upstream=MISSING)
        return fig

    def connections(self, k) -> int:
        return k.rb_clients * k.rb_pipeline

    def verify(self, ctx, row, v) -> None:
        failed = sum(run.get("evalsha_failed", 0) for run in ctx.runs[row.name].values())
        if failed:
            v.fail(f"{row.name}: EVALSHA calls failed")
        v.say(f"{row.name}: {failed} failed EVALSHA calls in the measured runs")

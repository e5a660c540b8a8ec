#!/usr/bin/env python3
"""bench/bench.py: slidegate next to the anchors a team would otherwise use, in one invocation.

Usage: bench/run.sh [--quick] [TARGET...]     (from any directory; root only to install)
  TARGET... (or BENCH_TARGETS="nginx peer redis-hot") selects rows; default: every default row.
  --quick: 3 s runs, 1 s warm-up, 1 round (environment knobs still win).
  Knobs (BENCH_*): bench/README.md. bench/run.sh installs what the rows need, then runs this.

On loopback only, it builds the release binaries, starts a private redis-server, the demo
upstream and every selected row's front (all on free ports), then
  1. loads the rows group by group (wrk rows, then batch with redis-benchmark, then the gRPC
     call rows), BENCH_ROUNDS rounds, order reversed every other round, each measured run
     preceded by a warm-up;
  2. loads the chosen rows at half their peak (hey, paced wrk, paced calls) for p99;
  3. prints per-round figures, medians, CPU microseconds per request of every process involved
     (from /proc/PID/stat before and after each measured run), ratios against the anchors;
  4. verifies in slidegate's /metrics and in Redis that every allowed request was decided in
     Redis (exit 1 if not);
  5. prints the goals as PASS/MISS lines and Markdown tables for bench/README.md.
Every process it starts is stopped on exit, including on failure or Ctrl-C.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the work tree
sys.path.insert(0, str(Path(__file__).resolve().parent))

import rows as bench_rows  # noqa: E402  (the table)
from harness import goals, half, report, tools  # noqa: E402
from harness.context import Bench  # noqa: E402
from harness.knobs import Knobs  # noqa: E402
from harness.log import BenchError, log  # noqa: E402
from harness.procs import wait_http  # noqa: E402
from harness.redis import start_redis  # noqa: E402
from harness.row import requested_names, select  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
START = time.time()


class Interrupted(Exception):
    """Ctrl-C or SIGTERM: stop everything, exit 130 / 143."""


def usage(table) -> str:
    lines = [__doc__.split("\n", 2)[2].rstrip(), "", "Rows (bench/rows.py; * not in the default set):"]
    for row in table:
        lines.append(f"  {row.name:<16}{'*' if not row.default else ' '} {row.about}")
    return "\n".join(lines)


def needs_of(rows, half_plan) -> list:
    """Every tool the selected rows and half-load kinds need."""
    needs = [tools.REDIS_SERVER]
    for row in rows:
        needs += list(row.front.needs) + list(row.load.needs)
    for kind, chosen in half_plan:
        needs += list(kind.needs) if chosen else []
    unique = {}
    for need in needs:
        unique.setdefault(need.what, need)
    return list(unique.values())


def build(ctx) -> None:
    """The release binaries, and the cargo examples the selected loads run."""
    log("building release binaries (cargo build --release --bins)")
    ctx.sup.run(["cargo", "build", "--release", "--bins", "--quiet"], ctx.tmp / "build.txt", 1800,
                "cargo build")
    for example in dict.fromkeys(e for row in ctx.rows for e in row.load.cargo_examples):
        log(f"building a load generator (cargo build --release --example {example})")
        ctx.sup.run(["cargo", "build", "--release", "--example", example, "--quiet"], ctx.tmp / "build.txt", 1800,
                    f"building the {example} example")
    if not (ctx.gateway_bin.exists() and ctx.upstream_bin.exists()):
        raise BenchError("release binaries not found under target/release")


def start_services(ctx) -> None:
    """Redis (with a replica if a row asks for one), the demo upstream, every row's front."""
    ctx.redis = start_redis(ctx, replica=any(row.front.needs_replica for row in ctx.rows))
    port = ctx.upstream_port = ctx.ports.pick()
    log(f"starting demo-upstream on 127.0.0.1:{port}")
    proc = ctx.sup.service("upstream", [str(ctx.upstream_bin), f"127.0.0.1:{port}"])
    ctx.cpu.add("upstream", [proc.pid])
    wait_http("demo-upstream", f"http://127.0.0.1:{port}/", proc)
    by_process = {}
    for row in ctx.rows:  # rows served by one process start it once (the peer's two)
        by_process.setdefault(row.front.process(row), []).append(row)
    for rows in by_process.values():
        rows[0].front.start(ctx, rows)


def measure(ctx) -> None:
    """Each group of rows (by load) in BENCH_ROUNDS rounds, order reversed every other round,
    so slow drift of the machine hits every row."""
    groups = {}
    for row in ctx.rows:
        groups.setdefault(row.load.group, []).append(row)
    for rows in groups.values():
        log(rows[0].load.describe(ctx, rows))
        for r in range(1, ctx.k.rounds + 1):
            for row in rows if r % 2 else rows[::-1]:
                log(f"round {r}/{ctx.k.rounds}: {row.name}")
                ctx.runs[row.name][r] = row.load.measure(ctx, row, r)
    for kind, rows in ctx.half_plan:
        if rows:
            kind.run_all(ctx, rows)


def run(ctx) -> int:
    build(ctx)
    start_services(ctx)
    measure(ctx)
    report.medians(ctx)
    report.figures(ctx)
    if not report.verification(ctx):
        return 1
    goals.show_all(ctx)
    report.markdown(ctx)
    print()
    print(f"total time: {int(time.time() - START)} s (build included)")
    return 0


def main(argv) -> int:
    quick = missing = show_help = False
    names = []
    for arg in argv:
        if arg == "--quick":
            quick = True
        elif arg in ("-h", "--help"):
            show_help = True
        elif arg == "--missing-packages":  # for bench/run.sh: the apt packages to install
            missing = True
        elif arg.startswith("-"):
            print(f"[bench] ERROR: unknown option {arg} (see --help)", file=sys.stderr)
            return 2
        else:
            names.append(arg)
    k = Knobs.from_env(quick)
    table = bench_rows.table(k)
    if show_help:
        if not missing:
            print(usage(table))
        return 0
    selected = select(table, requested_names(names, k.targets, table), k.baseline_bin)
    half_plan = half.plan(table, selected, k)
    needs = needs_of(selected, half_plan)
    if missing:
        print(" ".join(dict.fromkeys(n.package for n in needs if n.package and not n.present())))
        return 0
    for need in needs:
        if not need.present():
            raise BenchError(f"missing required tool: {need.what}")
    ctx = Bench(ROOT, k, table, selected, half_plan)
    ctx.open()
    rc = 1
    try:
        rc = run(ctx)
    except BenchError as e:
        print(f"[bench] ERROR: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        rc = 130
    except Interrupted as e:
        rc = e.args[0]
    finally:
        if rc in (130, 143):
            log("interrupted, stopping everything")
        ctx.close(show_logs=rc not in (0, 130, 143))
    return rc


def _terminated(signum, frame):
    raise Interrupted(143)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminated)
    sys.stdout.reconfigure(line_buffering=True)
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print(f"[bench] ERROR: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except Interrupted as e:
        sys.exit(e.args[0])

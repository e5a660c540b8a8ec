"""The printed report: per-round figures, medians with ratios, half load, verification with
the decision calls per row, and the Markdown tables for bench/README.md.

Column formats are the ones bench/README.md's "Reading the output" describes; a figure that
was not measured is "-".
"""

from __future__ import annotations

import os

from .checks import Verdict
from .numbers import MISSING, fmt_num, median_of, one_decimal, quotient
from .row import ONE_2XX, SOME_401


def medians(ctx) -> None:
    """ctx.med[row][field]: each column's median over the rounds, independently."""
    for row in ctx.rows:
        runs = ctx.runs[row.name]
        med = {f: median_of(runs, f) for f in ("rps", "p50", "p99")}
        med.update({f: one_decimal(median_of(runs, f)) for f in ("front", "redis", "upstream", "client", "redis_dec")})
        ctx.med[row.name] = med


def ratio(ctx, row) -> str:
    """The row's median rate over its anchor's ("1.23x"), or "-"."""
    if not row.anchor:
        return MISSING
    return quotient(ctx.med[row.name]["rps"], ctx.med.get(row.anchor, {}).get("rps", MISSING), "%.2fx")


def figures(ctx) -> None:
    """The per-round table, the medians and the half-load sections."""
    k = ctx.k
    print()
    print(f"slidegate and its anchors — wrk -t{k.threads} -c{k.conns} -d{k.seconds}s --latency"
          f" http://127.0.0.1:PORT{k.path} (warm-up {k.warmup}s, {k.rounds} round(s), order reversed every other"
          " round)")
    print(f"machine: {len(os.sched_getaffinity(0))} CPU(s); load generator, proxies, demo upstream and redis share"
          " them. CPU columns: microseconds of CPU per request (per decision where req/s is decisions/s), from"
          " /proc/PID/stat")
    print()
    head = "%-5s %-15s %12s %9s %9s %8s %8s %9s %8s %8s %8s %8s %9s"
    print(head % ("round", "target", "req/s", "p50 ms", "p99 ms", "non-2xx", "sockerr", "front-us", "redis-us",
                  "up-us", "client-us", "evalsha", "dec/call"))
    for r in range(1, k.rounds + 1):
        for row in ctx.rows:
            run = ctx.runs[row.name].get(r)
            if not run:
                continue
            dpc = quotient(run["decisions"], run["evalsha"], "%.1f")
            print("%-5s %-15s %12.0f %9.3f %9.3f %8s %8s %9s %8s %8s %8s %8s %9s" % (
                r, row.name, run["rps"], run["p50"], run["p99"], run.get("non2xx", MISSING),
                run.get("sockerr", MISSING), run["front"], run["redis"], run["upstream"], run["client"],
                run["evalsha"], dpc))
    for note in _notes(ctx.table):
        print(note)
    print()
    print(f"medians over {k.rounds} round(s) (each column independently); ratio = req/s over the anchor's:")
    line = "%-15s %-22s %12s %9s %9s %9s %8s %8s %9s %10s %8s"
    print(line % ("target", "process", "req/s", "p50 ms", "p99 ms", "front-us", "redis-us", "up-us", "client-us",
                  "redis/dec", "ratio"))
    for row in ctx.rows:
        m = ctx.med[row.name]
        print(line % (row.name, row.front.label(k), fmt_num(m["rps"]), m["p50"], m["p99"], m["front"], m["redis"],
                      m["upstream"], m["client"], m["redis_dec"], ratio(ctx, row)))
    for kind, rows in ctx.half_plan:
        if rows:
            kind.report(ctx, rows)


def _names(rows) -> str:
    names = [r.name for r in rows]
    return " and ".join(filter(None, (", ".join(names[:-1]), names[-1]))) if names else ""


def _notes(table) -> list:
    """What the per-round table's columns mean on the rows that differ (from the row kinds)."""
    decisions = [r for r in table if r.load.unit != "req/s"]
    denies = [r for r in table if r.answers == ONE_2XX]
    logins = [r for r in table if r.answers == SOME_401]
    leavers = [r for r in table if getattr(r.load, "leavers", False)]
    notes = [f"({_names(decisions)}: req/s is decisions/s, p50/p99 per call (per command for redis-benchmark);"]
    notes.append(f" non-2xx is expected on {_names(denies)}, every request after the first a 429, and on"
                 f" {_names(logins)}, their 401s;")
    notes += [f" {r.name}'s req/s is its wrk clients', its CPU per attempt counts those that left too" for r in leavers]
    notes[-1] += ")"
    return notes


def verification(ctx) -> bool:
    """Runs every row's load check and checks, prints them and the decision calls; True if all hold."""
    print()
    print("verification (load generator counts incl. warm-ups, slidegate /metrics, Redis ZCARD and INFO"
          " commandstats):")
    ok = True
    for row in ctx.rows:
        v = Verdict(ctx, row)
        row.load.verify(ctx, row, v)
        for check in row.checks:
            check.check(ctx, row, v)
        v.print()
        ok = ok and not v.fails
    print("  EVALSHA in the measured runs (INFO commandstats):")
    print("    %-15s %10s %12s %14s %18s" % ("target", "calls", "decisions", "decisions/call", "Redis us/decision"))
    for row in ctx.rows:
        if not row.uses_redis:
            continue
        runs = ctx.runs[row.name].values()
        calls, decisions = sum(r["evalsha"] for r in runs), sum(r["decisions"] for r in runs)
        print("    %-15s %10d %12d %14s %18s" % (row.name, calls, decisions, quotient(decisions, calls, "%.2f"),
                                                 ctx.med[row.name]["redis_dec"]))
    if not ok:
        print("VERIFICATION FAILED: the figures above are not valid")
    else:
        print("  OK: every allowed decision was made in Redis (or failed open within the WARN rule), every target answered as configured")
    return ok


def markdown(ctx) -> None:
    """The medians (and the A/B and half-load tables) as Markdown, ready for bench/README.md."""
    k = ctx.k
    print()
    print(f"Markdown (medians of {k.rounds} round(s), wrk -t{k.threads} -c{k.conns} -d{k.seconds}s; CPU in µs per"
          " request, per decision where the rate is decisions/s):")
    print()
    print("| target | process | req/s | p50 ms | p99 ms | proxy CPU µs | Redis CPU µs | upstream CPU µs |"
          " client CPU µs | ratio |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for row in ctx.rows:
        m = ctx.med[row.name]
        rq = ratio(ctx, row)
        rq = f"{rq} {row.anchor}" if rq != MISSING else rq
        print(f"| {row.name} | {row.front.label(k)} | {fmt_num(m['rps'])} | {m['p50']} | {m['p99']} | {m['front']} |"
              f" {m['redis']} | {m['upstream']} | {m['client']} | {rq} |")
    ab = [row for row in ctx.rows if row.ab]
    if k.baseline_bin and ab:
        print()
        print("| A/B (baseline: the -base rows) | new req/s | old req/s | new/old | gateway CPU µs new | old |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for row in ab:
            new, old = ctx.med[row.name], ctx.med[f"{row.name}-base"]
            print(f"| {row.name} | {fmt_num(new['rps'])} | {fmt_num(old['rps'])} | {quotient(new['rps'], old['rps'])} |"
                  f" {new['front']} | {old['front']} |")
    for kind, rows in ctx.half_plan:
        if rows:
            kind.markdown(ctx, rows)

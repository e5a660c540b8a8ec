"""p99 at half of peak load: each chosen row again at half its median peak rate, paced.

Three ways, by what a row's requests are: `Hey` sends one request over and over (rows without
a script); `Paced` is wrk with the row's own script, paced by bench/wrk_pace.lua (every request
differs); `PacedCalls` is a call generator's own `--rate`, each call's latency counted from
when it was due. BENCH_HALF_RATE=common gives every row of a kind the lowest peak among them.
"""

from __future__ import annotations

import re
from typing import List

from . import tools
from .log import die, log
from .numbers import MISSING, fmt_num, median_of
from .row import SOME_401
from .wrk import parse_wrk


class HalfLoad:
    """A row's half-load run: `vs` names a row whose p99 it is printed against; `default`
    puts it in the set of its knob (BENCH_HALF_TARGETS / BENCH_HALF_KEYED_TARGETS)."""

    knob = None  # the Knobs field that lists the rows of this kind; None: every selected one
    env = None
    needs: tuple = ()

    def __init__(self, vs: str = None, default: bool = True):
        self.vs = vs
        self.default = default

    @classmethod
    def peaks(cls, ctx, rows) -> dict:
        """The rate each row is paced at: half its median peak (or the lowest of them)."""
        peak = {}
        for row in rows:
            p = median_of(ctx.runs[row.name], "rps")
            if p == MISSING:
                die(f"no measured rate for {row.name}")
            peak[row.name] = float(p)
        if ctx.k.half_rate == "common":
            lowest = min(peak.values())
            peak = dict.fromkeys(peak, lowest)
        return {name: p / 2 for name, p in peak.items()}

    @staticmethod
    def _which(ctx) -> str:
        return "each target's own" if ctx.k.half_rate == "own" else "the lowest of these targets'"

    @staticmethod
    def _warn(got: float, asked: float, what: str) -> None:
        if got < 0.9 * asked:
            log(f"WARN: {what} reached {got:.1f} of the {asked:.0f} asked (load generator or machine saturated)")

    @staticmethod
    def _p99_differences(ctx, rows) -> None:
        for row in rows:
            vs = row.half.vs
            if vs and vs in ctx.half and row.name in ctx.half:
                diff = float(ctx.half[row.name]["p99"]) - float(ctx.half[vs]["p99"])
                print("p99 at half load, %s - %s: %+.3f ms" % (row.name, vs, diff))

    @classmethod
    def markdown(cls, ctx, rows) -> None:
        pass


class Hey(HalfLoad):
    """hey -z BENCH_HALF_SECONDS -c BENCH_HEY_CONNS -q <half the peak / connections>."""

    knob, env = "half_targets", "BENCH_HALF_TARGETS"
    needs = (tools.command("hey", "hey"),)

    @classmethod
    def run_all(cls, ctx, rows) -> None:
        k = ctx.k
        rates = cls.peaks(ctx, rows)
        for row in rows:
            q = "%.1f" % max(0.1, rates[row.name] / k.hey_conns)  # hey -q is per worker
            asked = float(q) * k.hey_conns
            log(f"half load: hey -z {k.half_seconds}s -c {k.hey_conns} -q {q} against {row.name}")
            out = ctx.tmp / f"hey-{row.name}.txt"
            ctx.sup.run(["hey", "-z", f"{k.half_seconds}s", "-c", str(k.hey_conns), "-q", q, row.load.url(ctx, row)],
                        out, k.half_seconds + 60, f"hey against {row.name}")
            text = out.read_text(errors="replace")
            rps = re.search(r"Requests/sec:\s+([0-9.]+)", text)
            p99 = re.search(r"99%+ in ([0-9.]+)", text)
            if not (rps and p99):
                die(f"could not parse hey output for {row.name}")
            answers = [(int(c), int(n)) for c, n in re.findall(r"^\s*\[(\d+)\]\s+(\d+) responses", text, re.M)]
            errors_at = text.find("Error distribution:")
            failed = sum(int(n) for n in re.findall(r"^\s*\[(\d+)\]", text[errors_at:], re.M)) if errors_at >= 0 else 0
            bad = sum(n for c, n in answers if c != 200) + failed
            done = sum(n for _, n in answers) + failed
            ctx.half[row.name] = {"asked": "%.0f" % asked, "rps": "%.1f" % float(rps.group(1)),
                                  "p99": "%.3f" % (float(p99.group(1)) * 1000), "bad": bad}
            cls._warn(float(rps.group(1)), asked, f"hey against {row.name}")
            # Requests hey sent to a limited row count for the checks.
            ctx.tot[row.name].update(completed=done, ok2xx=done - bad, runs=1)

    @classmethod
    def report(cls, ctx, rows) -> None:
        k = ctx.k
        print()
        print(f"p99 at half of peak load (hey -z {k.half_seconds}s -c {k.hey_conns}, rate = half the median peak"
              f" req/s, {cls._which(ctx)}):")
        print("%-12s %12s %12s %10s %9s" % ("target", "rate asked", "req/s", "p99 ms", "non-200"))
        for row in rows:
            h = ctx.half[row.name]
            print("%-12s %12s %12s %10s %9s" % (row.name, h["asked"], h["rps"], h["p99"], h["bad"]))
        cls._p99_differences(ctx, rows)

    @classmethod
    def markdown(cls, ctx, rows) -> None:
        print()
        print("| p99 at half load | rate | p99 ms |")
        print("| --- | ---: | ---: |")
        for row in rows:
            h = ctx.half[row.name]
            print(f"| {row.name} | {fmt_num(h['rps'])} req/s | {h['p99']} |")


class Paced(HalfLoad):
    """wrk with the row's script on the peak runs' connections, BENCH_RATE set (wrk_pace.lua)."""

    knob, env = "half_keyed_targets", "BENCH_HALF_KEYED_TARGETS"

    @classmethod
    def run_all(cls, ctx, rows) -> None:
        k = ctx.k
        rates = cls.peaks(ctx, rows)
        for row in rows:
            rate = int("%.0f" % max(1, rates[row.name]))
            log(f"half load: wrk -t{k.threads} -c{row.load.connections(k)} -d{k.half_seconds}s paced at {rate} req/s"
                f" against {row.name}")
            out = ctx.tmp / f"paced-{row.name}.txt"
            row.load.run(ctx, row, k.half_seconds, out, latency=True, rate=rate)
            fig = parse_wrk(out) or die(f"could not parse paced wrk output for {row.name}")
            ctx.half[row.name] = {"asked": str(rate), "rps": "%.2f" % fig["rps"], "p99": "%.3f" % fig["p99"],
                                  "bad": fig["non2xx"]}
            cls._warn(fig["rps"], rate, f"paced wrk against {row.name}")
            ctx.tot[row.name].update(completed=fig["done"], ok2xx=fig["done"] - fig["non2xx"], runs=1)

    @classmethod
    def report(cls, ctx, rows) -> None:
        k = ctx.k
        print()
        print(f"p99 at half of peak load, keyed targets (wrk -t{k.threads} -c{k.conns} -d{k.half_seconds}s --latency,"
              f" paced by bench/wrk_pace.lua at half the median peak req/s, {cls._which(ctx)}):")
        print("%-14s %12s %12s %10s %9s" % ("target", "rate asked", "req/s", "p99 ms", "non-2xx"))
        for row in rows:
            h = ctx.half[row.name]
            print("%-14s %12s %12s %10s %9s" % (row.name, h["asked"], h["rps"], h["p99"], h["bad"]))
        cls._p99_differences(ctx, rows)
        for row in rows:
            if row.answers == SOME_401:
                print(f"({row.name}: non-2xx are the 401s of failed logins, by design)")

    @classmethod
    def markdown(cls, ctx, rows) -> None:
        print()
        print("| p99 at half load (paced wrk) | rate | p99 ms |")
        print("| --- | ---: | ---: |")
        for row in rows:
            h = ctx.half[row.name]
            print(f"| {row.name} | {fmt_num(h['rps'])} req/s | {h['p99']} |")


class PacedCalls(HalfLoad):
    """A call generator's own `--rate` (every selected row that declares it, while BENCH_HALF=1)."""

    @classmethod
    def run_all(cls, ctx, rows) -> None:
        k = ctx.k
        rates = cls.peaks(ctx, rows)
        for row in rows:
            rate = int("%.0f" % max(1, rates[row.name]))
            log(f"half load: {row.name} load generator paced at {rate} calls/s for {k.half_seconds}s")
            kv = row.load.run(ctx, row, k.half_seconds, ctx.tmp / f"{row.name}-half.txt", rate=rate)
            ctx.half[row.name] = {"asked": str(rate), "rps": kv.get("dps", MISSING), "p99": kv.get("p99_ms", MISSING)}
            cls._warn(float(kv.get("dps", 0)), rate, f"the paced {row.name} run")

    @classmethod
    def report(cls, ctx, rows) -> None:
        for row in rows:
            h = ctx.half[row.name]
            print()
            print(f"{row.name} at half of its peak ({row.load.source} paced at {h['asked']} calls/s,"
                  f" {ctx.k.half_seconds}s): {h['rps']} decisions/s, p99 {h['p99']} ms")


KINDS = (Hey, Paced, PacedCalls)


def plan(table, selected, k) -> List[tuple]:
    """[(kind, rows)] of the half-load step: the rows of each kind the knobs choose, if selected."""
    chosen = []
    by_name = {r.name: r for r in selected}
    for kind in KINDS:
        eligible = [r for r in table if isinstance(r.half, kind)]
        if kind.knob:
            listed = getattr(k, kind.knob)
            names = listed.split() if listed is not None else [r.name for r in eligible if r.half.default]
            for name in names:
                if name not in {r.name for r in eligible}:
                    die(f"{kind.env}: only {', '.join(r.name for r in eligible)}")
            rows = [by_name[n] for n in names if n in by_name]
        else:
            rows = [r for r in selected if isinstance(r.half, kind)]
        chosen.append((kind, rows if k.half else []))
    return chosen

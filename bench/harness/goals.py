"""Goals: PASS/MISS lines (a MISS does not fail the run), SKIP when a figure is missing, and
INFO lines that carry a figure without a goal (printed only when measured).

A row lists its goals in bench/rows.py; `of` names the row a goal compares with (the row's
anchor when left out). A/B goals are added for every row with `ab=True` when a baseline ran.
"""

from __future__ import annotations

from typing import Optional

from .numbers import MISSING, fmt_num, quotient

AB_AT_LEAST = 0.97  # new build's req/s over the baseline's, same rounds


def _line(verdict: str, label: str, detail: str) -> None:
    print("  %-4s  %-48s %s" % (verdict, label, detail))


def judge(label: str, value: str, op: str, bound: str, detail: str) -> None:
    """PASS/MISS of value `op` bound (op: "ge" or "le"), SKIP when either is missing."""
    if value in (MISSING, "", None) or bound in (MISSING, "", None):
        _line("SKIP", label, "(not measured)")
        return
    v, b = float(value), float(bound)
    _line("PASS" if (v >= b if op == "ge" else v <= b) else "MISS", label, detail)


def _med(ctx, name: str, field: str) -> str:
    return ctx.med.get(name, {}).get(field, MISSING)


def _rates(ctx, a: str, b: str) -> str:
    return f"{fmt_num(_med(ctx, a, 'rps'))} vs {fmt_num(_med(ctx, b, 'rps'))}"


class Rate:
    """The row's rate at least `at_least` times `of`'s (the anchor's by default)."""

    def __init__(self, at_least: float, of: Optional[str] = None):
        self.at_least = at_least
        self.of = of

    def show(self, ctx, row) -> None:
        of = self.of or row.anchor
        q = quotient(_med(ctx, row.name, "rps"), _med(ctx, of, "rps"))
        unit = row.load.unit
        rates = _rates(ctx, row.name, of) + (" decisions/s" if unit != "req/s" else "")
        judge(f"{row.name} >= {self.at_least}x {of} ({unit})", q, "ge", str(self.at_least), f"{q} x ({rates})")


class GatewayCpu:
    """The gateway's CPU per request (Redis excluded) at most `times` x `of`'s, or `of`'s + `plus` µs."""

    def __init__(self, of: str, times: Optional[float] = None, plus: Optional[float] = None):
        self.of, self.times, self.plus = of, times, plus

    def show(self, ctx, row) -> None:
        g, n = _med(ctx, row.name, "front"), _med(ctx, self.of, "front")
        if self.times is not None:
            label = f"{row.name} gateway CPU/req <= {self.times}x {self.of}'s"
            bound = MISSING if n == MISSING else "%.3f" % (float(n) * self.times)
        else:
            label = f"{row.name} gateway CPU/req <= {self.of}'s + {self.plus:g} us"
            bound = MISSING if n == MISSING else "%.3f" % (float(n) + self.plus)
        judge(label, g, "le", bound, f"{g} us vs {self.of} {n} us (bound {bound} us, Redis excluded)")


class RedisCpu:
    """Redis's CPU per decision at most `at_most` µs."""

    def __init__(self, at_most: float):
        self.at_most = at_most

    def show(self, ctx, row) -> None:
        v = _med(ctx, row.name, "redis_dec")
        judge(f"{row.name} Redis CPU/decision <= {self.at_most:g} us", v, "le", str(self.at_most), f"{v} us")


class RedisCpuOf:
    """Redis's CPU per decision at most `times` x `of`'s."""

    def __init__(self, of: str, times: float):
        self.of, self.times = of, times

    def show(self, ctx, row) -> None:
        v, o = _med(ctx, row.name, "redis_dec"), _med(ctx, self.of, "redis_dec")
        bound = MISSING if o == MISSING else "%.3f" % (float(o) * self.times)
        judge(f"{row.name} Redis CPU/decision <= {self.times}x {self.of}'s", v, "le", bound,
              f"{v} us vs {self.of} {o} us")


class HalfP99:
    """The row's p99 at half load at most `of`'s + `plus_ms`, or below `below_ms`."""

    def __init__(self, of: Optional[str] = None, plus_ms: Optional[float] = None, below_ms: Optional[float] = None):
        self.of, self.plus_ms, self.below_ms = of, plus_ms, below_ms

    def show(self, ctx, row) -> None:
        mine = ctx.half.get(row.name, {})
        p99 = mine.get("p99", MISSING)
        if self.below_ms is not None:
            judge(f"{row.name} p99 at half load < {self.below_ms:g} ms", p99, "le", str(self.below_ms),
                  f"{p99} ms at {mine.get('rps', MISSING)} {row.load.unit}")
            return
        theirs = ctx.half.get(self.of, {}).get("p99", MISSING)
        bound = MISSING if theirs == MISSING else "%.3f" % (float(theirs) + self.plus_ms)
        judge(f"{row.name} p99 at half load <= {self.of} p99 + {self.plus_ms:g} ms", p99, "le", bound,
              f"{p99} ms vs {self.of} {theirs} ms")


class Info:
    """INFO: the row's rate over `of`'s, no goal (printed only when both were measured)."""

    def __init__(self, of: str):
        self.of = of

    def show(self, ctx, row) -> None:
        q = quotient(_med(ctx, row.name, "rps"), _med(ctx, self.of, "rps"))
        if q != MISSING:
            _line("INFO", f"{row.name} / {self.of} ({row.load.rate_label()}), no goal",
                  f"{q} x ({_rates(ctx, row.name, self.of)}{row.load.info_note(ctx, row)})")


class InfoByCpu:
    """INFO: the row's rate over `of`'s as the CPU per request of every process predicts it on
    saturated cores, each measured in units of the upstream's CPU per request. Both rows send
    the same answers, so the upstream does the same work in each: a change of the machine's speed
    between the two rows (seen here: 40 %) cancels out, where the req/s ratio takes it whole."""

    def __init__(self, of: str):
        self.of = of

    def show(self, ctx, row) -> None:
        def units(name: str):
            m = ctx.med.get(name, {})
            try:
                up = float(m["upstream"])
                return [float(m[f]) / up for f in ("front", "redis", "client")] if up > 0 else None
            except (KeyError, ValueError):
                return None

        mine, theirs = units(row.name), units(self.of)
        if mine is None or theirs is None:
            return
        q = (1 + sum(theirs)) / (1 + sum(mine))
        _line("INFO", f"{row.name} / {self.of} by CPU per request, no goal",
              "%.3f x (gateway %.2f vs %.2f, client %.2f vs %.2f; the upstream's = 1)"
              % (q, mine[0], theirs[0], mine[2], theirs[2]))


class InfoHalfP99:
    """INFO: the row's p99 at half load next to `of`'s, no goal."""

    def __init__(self, of: str):
        self.of = of

    def show(self, ctx, row) -> None:
        mine, theirs = ctx.half.get(row.name), ctx.half.get(self.of)
        if mine and theirs:
            _line("INFO", f"{row.name} p99 at half load, no goal", f"{mine['p99']} ms vs {self.of} {theirs['p99']} ms")


class AB:
    """This build at least AB_AT_LEAST x the baseline binary's rate, the same config and rounds."""

    def show(self, ctx, row) -> None:
        base = f"{row.name}-base"
        q = quotient(_med(ctx, row.name, "rps"), _med(ctx, base, "rps"))
        cpu = quotient(_med(ctx, row.name, "front"), _med(ctx, base, "front"), "%.2fx")
        judge(f"A/B {row.name} new >= {AB_AT_LEAST}x old (req/s)", q, "ge", str(AB_AT_LEAST),
              f"{q} x ({_rates(ctx, row.name, base)}; gateway CPU/req new/old {cpu})")


def show_all(ctx) -> None:
    """Every goal of every row of the table (SKIP where not selected), then the A/B goals."""
    print()
    print("goals (PASS/MISS; a MISS does not fail the run):")
    for row in ctx.table:
        for goal in row.goals:
            goal.show(ctx, row)
    if ctx.k.baseline_bin:
        for row in ctx.rows:
            if row.ab:
                AB().show(ctx, row)

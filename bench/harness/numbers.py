"""Numbers as the report prints them: medians over rounds, CPU per unit, thousands separators.

A figure that was not measured is the string "-" everywhere; CPU figures are kept as the
strings printed (one decimal), as the per-round table shows them.
"""

from __future__ import annotations

from typing import Dict, Iterable

MISSING = "-"


def median(values: Iterable[float]) -> str:
    """The median ("%.3f"; the mean of the middle two when even), or "-" of nothing."""
    v = sorted(values)
    if not v:
        return MISSING
    mid = len(v) // 2
    return "%.3f" % (v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2)


def median_of(runs: Dict[int, dict], field: str) -> str:
    """The median of one field over the measured rounds of a row (unmeasured values skipped)."""
    values = [r.get(field) for r in runs.values()]
    return median(float(x) for x in values if x is not None and x != MISSING)


def one_decimal(value: str) -> str:
    """A median re-printed with one decimal (CPU columns)."""
    return MISSING if value == MISSING else "%.1f" % float(value)


def per_unit(amount: float, units: int) -> str:
    """`amount` (already in microseconds) per unit, "%.1f", or "-" with no units."""
    return "%.1f" % (amount / units) if units > 0 else MISSING


def fmt_num(value) -> str:
    """A rate rounded to a whole number with thousands separators ("-" stays)."""
    if value is None or value == MISSING:
        return MISSING
    return "{:,}".format(int("%.0f" % float(value)))


def quotient(a, b, fmt: str = "%.3f") -> str:
    """a / b formatted, or "-" when either is missing or b is not positive."""
    if a in (None, MISSING) or b in (None, MISSING) or float(b) <= 0:
        return MISSING
    return fmt % (float(a) / float(b))

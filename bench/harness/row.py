"""A bench row: one declarative entry of bench/rows.py, and how a run selects rows.

A row names what runs (its front: NGINX, the peer, HAProxy, a slidegate with a generated
route), how it is loaded (wrk, the batch client, redis-benchmark, the gRPC load generator),
what it is compared with (its anchor), what must hold afterwards (checks) and the goals.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import List, Optional, Sequence

from .log import die

# What a row's answers must be (wrk rows).
ALL_2XX = "2xx"  # every answer 2xx
ONE_2XX = "one-2xx"  # a deny row: at most one 2xx in the whole run, every later request a 429
SOME_401 = "401"  # 401s by design (a login route); its checks count them


@dataclass(frozen=True)
class Row:
    """One row of the bench: a target with its front, load, anchor, checks and goals."""

    name: str
    about: str  # one line for --help
    front: object  # fronts.py / gateway.py
    load: object  # wrk.py / loads.py
    anchor: Optional[str] = None  # the row whose rate the ratio is taken against
    answers: str = ALL_2XX
    checks: tuple = ()  # checks.py, run in order after the load
    goals: tuple = ()  # goals.py
    half: object = None  # half.py: how the row is loaded at half its peak, if at all
    ab: bool = False  # also run on BENCH_BASELINE_BIN as <name>-base
    default: bool = True  # in the set that runs when no row is named
    companion: Optional[str] = None  # a row that always runs with this one (alternating rounds)
    twin_of: Optional[str] = None  # set on a -base row: the row it is the A/B twin of

    @property
    def uses_redis(self) -> bool:
        """Whether the row's decisions happen in Redis (its front's or its load's)."""
        return self.front.uses_redis or self.load.uses_redis

    @property
    def route_name(self) -> str:
        """The name of the row's route (a -base twin keeps its twin's)."""
        return self.twin_of or self.name

    def twin(self, baseline_bin: str) -> "Row":
        """The -base row: the same route and checks on an older binary, its own process and keys."""
        return dataclasses.replace(
            self, name=f"{self.name}-base", front=self.front.on_binary(baseline_bin), goals=(),
            half=None, ab=False, companion=None, twin_of=self.name,
        )


def requested_names(args: Sequence[str], targets_env: Optional[str], table: List[Row]) -> List[str]:
    """The rows asked for: the command line, else BENCH_TARGETS, else every default row."""
    if args:
        return list(args)
    if targets_env:
        return targets_env.split()
    return [r.name for r in table if r.default]


def select(table: List[Row], names: Sequence[str], baseline_bin: Optional[str]) -> List[Row]:
    """The selected rows in table order, companions added, each A/B row followed by its twin."""
    by_name = {r.name: r for r in table}
    wanted = set()
    for name in names:
        row = by_name.get(name)
        if row is None:
            die(f"unknown target '{name}' (known: {' '.join(by_name)})")
        wanted.add(name)
        if row.companion:
            wanted.add(row.companion)
    selected = []
    for row in table:
        if row.name in wanted:
            selected.append(row)
            if baseline_bin and row.ab:
                selected.append(row.twin(baseline_bin))
    return selected

"""One measured run's window: what is read just before it starts and just after it ends.

CPU ticks of every process group (the front under test, Redis, the upstream), the CPU of the
children the bench reaped (the load generator, with anything beside it), Redis's decision calls,
and the gateway's /metrics where the front is slidegate. Nothing is read while the load runs.
"""

from __future__ import annotations

from .numbers import MISSING, per_unit
from .procs import CLK_TCK, children_cpu_s


class Window:
    """`with Window(ctx, row) as w:` around a measured run, then the per-unit figures of `w`."""

    def __init__(self, ctx, row):
        self.ctx = ctx
        self.row = row

    def __enter__(self) -> "Window":
        ctx = self.ctx
        self.metrics_before = self.row.front.metrics(ctx, self.row)
        self.calls_before = ctx.redis.decision_calls()
        self.ticks_before = ctx.cpu.snapshot()
        self.child_before = children_cpu_s()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            ctx = self.ctx
            self.child_after = children_cpu_s()
            self.ticks_after = ctx.cpu.snapshot()
            self.calls_after = ctx.redis.decision_calls()
            self.metrics_after = self.row.front.metrics(ctx, self.row)
        return False

    @property
    def calls(self) -> int:
        """Decision calls (EVALSHA + FCALL) Redis counted during the run."""
        return self.calls_after[0] - self.calls_before[0]

    @property
    def failed_calls(self) -> int:
        """Decision calls that failed during the run."""
        return self.calls_after[1] - self.calls_before[1]

    def cpu_us(self, group, units: int) -> str:
        """CPU microseconds of a process group per unit of work, or "-" (no such group)."""
        if not self.ctx.cpu.has(group):
            return MISSING
        ticks = self.ticks_after[group] - self.ticks_before[group]
        return per_unit(ticks * 1e6 / CLK_TCK, units)

    def client_us(self, units: int) -> str:
        """The load generator's CPU microseconds per unit (0.0 with no units)."""
        return per_unit((self.child_after - self.child_before) * 1e6, units) if units > 0 else "0.0"

    def figures(self, units: int, decisions: int) -> dict:
        """The CPU columns and the Redis counts every row reports, per unit of its load."""
        front = self.row.front.process(self.row)
        return {
            "front": self.cpu_us(front, units),
            "redis": self.cpu_us("redis", units),
            "upstream": self.cpu_us("upstream", units),
            "client": self.client_us(units),
            "evalsha": self.calls,
            "evalsha_failed": self.failed_calls,
            "decisions": decisions,
            "redis_dec": self.cpu_us("redis", decisions),
        }

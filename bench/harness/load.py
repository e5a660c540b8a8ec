"""What every load is: the interface bench.py, the checks and the goals use.

A load drives a row's front and measures it: `measure` runs one round (warm-up, then a measured
run inside a `Window`) and returns the round's figures; `verify` starts the row's verification
line. Rows whose loads share a `group` alternate within each round.
"""

from __future__ import annotations


class Load:
    """The defaults; wrk.py and loads.py hold the loads."""

    group = ""  # rows of one group run together, order reversed every other round
    unit = "req/s"  # what the rate counts: "req/s" or "decisions/s"
    uses_redis = False  # whether the load itself decides in Redis (else the front says)
    needs: tuple = ()  # tools.Need of the machine
    cargo_examples: tuple = ()  # cargo examples to build first

    @staticmethod
    def describe(ctx, rows) -> str:
        """The log line that opens the group's rounds."""
        raise NotImplementedError

    def measure(self, ctx, row, r: int) -> dict:
        """Round `r`: rps, p50, p99 (ms), done, and the CPU columns of `Window.figures`."""
        raise NotImplementedError

    def verify(self, ctx, row, v) -> None:
        """The start of the row's verification line, with the load's own failures."""
        raise NotImplementedError

    def connections(self, k) -> int:
        """Requests (or calls) in flight at once: the checks' in-flight slack per run."""
        raise NotImplementedError

    def info_note(self, ctx, row) -> str:
        """What an INFO ratio line adds about this load."""
        return ""

    def rate_label(self) -> str:
        """What the rate of this load counts, for INFO lines."""
        return self.unit

"""Log lines and the one fatal error of the bench.

Every message goes to stderr with the `[bench]` prefix; a `BenchError` ends the run, and the
caller stops every process it started before exiting 1.
"""

import sys


class BenchError(Exception):
    """A problem that ends the run (exit 1, every process stopped, service logs shown)."""


def log(message: str) -> None:
    """One progress line on stderr."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def die(message: str):
    """Ends the run with `message` (raises `BenchError`)."""
    raise BenchError(message)

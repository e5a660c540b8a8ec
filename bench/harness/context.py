"""One run of the bench: its knobs and rows, the processes it started, and every figure.

`Bench` is handed to every front, load, check and goal. `open` makes the temp directory;
`close` stops every process (in reverse order), shows the service logs after a failure, and
removes the directory.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, Optional

from .procs import CpuGroups, Ports, Supervisor


class Bench:
    """The state of one run (see the module doc)."""

    def __init__(self, root: Path, knobs, table, rows, half_plan):
        self.root = root
        self.k = knobs
        self.table = table  # every row (goals of rows not selected print as SKIP)
        self.rows = rows  # the selected rows, in table order, twins after their row
        self.half_plan = half_plan  # [(half-load kind, rows)]
        self.gateway_bin = root / "target" / "release" / "slidegate"
        self.upstream_bin = root / "target" / "release" / "demo-upstream"
        self.token = secrets.token_hex(16)  # the admin listener's bearer token (batch)
        self.ports = Ports()
        self.cpu = CpuGroups()
        self.redis = None  # redis.Redis, once started
        self.upstream_port: Optional[int] = None
        self.listen: Dict[str, Dict[str, int]] = defaultdict(dict)  # row -> listener ("http", "admin", "rls") -> port
        self.runs: Dict[str, Dict[int, dict]] = defaultdict(dict)  # row -> round -> figures
        self.tot: Dict[str, Counter] = defaultdict(Counter)  # row -> counts over every run (warm-ups too)
        self.half: Dict[str, dict] = {}  # row -> its half-load figures
        self.med: Dict[str, dict] = {}  # row -> column -> median

    def open(self) -> None:
        """Makes the run's temp directory (configs, logs, load generators' output)."""
        self.tmp = Path(tempfile.mkdtemp(prefix="slidegate-bench."))
        self.tmp.chmod(0o755)  # nginx workers drop root privileges and must reach their temp paths
        self.sup = Supervisor(self.tmp)

    def close(self, show_logs: bool) -> None:
        """Stops everything; with `show_logs`, the tail of every service log first."""
        self.sup.stop_all()
        if show_logs:
            self.sup.tail_logs()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def script_env(self, rate: Optional[int] = None, extra: Optional[dict] = None) -> dict:
        """The environment of a load generator: what the wrk scripts read, BENCH_RATE only
        when pacing (bench/wrk_pace.lua)."""
        env = {k: v for k, v in os.environ.items() if k != "BENCH_RATE"}
        env.update(BENCH_USERS=str(self.k.users), BENCH_PHONES=str(self.k.phones),
                   BENCH_FAIL_SHARE=self.k.fail_share, BENCH_THREADS=str(self.k.threads))
        if rate is not None:
            env["BENCH_RATE"] = str(rate)
        env.update(extra or {})
        return env

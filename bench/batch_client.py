#!/usr/bin/env python3
"""bench/batch_client.py: load slidegate's batch API (POST /v1/decisions) for a fixed time.

    batch_client.py HOST PORT ROUTE SECONDS [--conns N] [--keys K] [--bodies B] [--prefix P]

The bearer token is read from the environment variable BENCH_ADMIN_TOKEN. Each of N threads
keeps one HTTP/1.1 keep-alive connection and posts, back to back, one of B prepared bodies of K
distinct keys each (B * K distinct keys in all, "P<number>"), until SECONDS have passed; the call
in flight then finishes and counts. Bodies are serialised once, up front, and replies are only
scanned for `"allowed":true`, so the client spends little CPU per decision (it reports its own).

Prints one line of `name=value` pairs: decisions, calls, seconds, dps (decisions/s), allowed,
denied, errors (keys answered with an "error" field), p50_ms, p99_ms (per call), cpu_s (this
process, all threads, while loading), cpu_us_per_decision. Exits 1 if any call does not answer 200.
"""

import argparse
import http.client
import json
import os
import resource
import sys
import threading
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("route")
    ap.add_argument("seconds", type=float)
    ap.add_argument("--conns", type=int, default=2)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--bodies", type=int, default=10)
    ap.add_argument("--prefix", default="k")
    args = ap.parse_args()
    token = os.environ.get("BENCH_ADMIN_TOKEN", "")
    if not token:
        print("batch_client: BENCH_ADMIN_TOKEN is not set", file=sys.stderr)
        return 2

    bodies = [
        json.dumps(
            {
                "route": args.route,
                "keys": [f"{args.prefix}{b * args.keys + i}" for i in range(args.keys)],
            },
            separators=(",", ":"),
        ).encode()
        for b in range(args.bodies)
    ]
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
    }

    def cpu_now() -> float:
        u = resource.getrusage(resource.RUSAGE_SELF)
        return u.ru_utime + u.ru_stime

    cpu_start = cpu_now()  # the bodies above are not part of the load
    lock = threading.Lock()
    totals = {"calls": 0, "allowed": 0, "denied": 0, "errors": 0}
    latencies: list[float] = []
    failures: list[str] = []
    start = time.monotonic()
    deadline = start + args.seconds

    def worker(n: int) -> None:
        conn = http.client.HTTPConnection(args.host, args.port, timeout=30)
        i = n
        my_lat: list[float] = []
        calls = allowed = denied = errors = 0
        try:
            while time.monotonic() < deadline:
                body = bodies[i % len(bodies)]
                i += args.conns
                t0 = time.monotonic()
                conn.request("POST", "/v1/decisions", body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
                my_lat.append(time.monotonic() - t0)
                if r.status != 200:
                    raise RuntimeError(f"HTTP {r.status}: {data[:200]!r}")
                calls += 1
                a = data.count(b'"allowed":true')
                allowed += a
                denied += data.count(b'"allowed":false')
                errors += data.count(b'"error":')
        except Exception as e:  # reported, and the run fails
            with lock:
                failures.append(f"connection {n}: {e}")
        finally:
            conn.close()
            with lock:
                totals["calls"] += calls
                totals["allowed"] += allowed
                totals["denied"] += denied
                totals["errors"] += errors
                latencies.extend(my_lat)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(args.conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start

    cpu = cpu_now() - cpu_start
    decisions = totals["allowed"] + totals["denied"]
    latencies.sort()

    def pct(p: float) -> float:
        if not latencies:
            return 0.0
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    print(
        f"decisions={decisions} calls={totals['calls']} seconds={elapsed:.3f} "
        f"dps={decisions / elapsed if elapsed > 0 else 0:.1f} allowed={totals['allowed']} "
        f"denied={totals['denied']} errors={totals['errors']} p50_ms={pct(0.50):.3f} "
        f"p99_ms={pct(0.99):.3f} cpu_s={cpu:.3f} "
        f"cpu_us_per_decision={cpu * 1e6 / decisions if decisions else 0:.3f}"
    )
    for f in failures:
        print(f"batch_client: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

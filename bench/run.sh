#!/usr/bin/env bash
# bench/run.sh: slidegate next to the anchors a team would otherwise use, in one invocation.
#
# The bench is the program bench/bench.py (its rows are declared in bench/rows.py). This script
# only installs with apt-get what the selected rows need and is missing (wrk nginx
# libnginx-mod-http-lua haproxy hey; root is needed for that), then runs the program with the
# same arguments and environment. `bench/run.sh --help` lists the rows; bench/README.md has
# the method, the knobs (BENCH_*) and the latest figures.
#
# Usage: bench/run.sh [--quick] [TARGET...]

set -euo pipefail
BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { printf '[bench] ERROR: %s\n' "$*" >&2; exit 1; }

command -v python3 >/dev/null 2>&1 || die "missing required tool: python3"
# Also checks the arguments and the knobs, before anything is installed.
packages=$(python3 "$BENCH_DIR/bench.py" --missing-packages "$@")
if [[ -n $packages ]]; then
    printf '[bench] installing %s with apt-get\n' "$packages" >&2
    export DEBIAN_FRONTEND=noninteractive
    timeout 600 apt-get update -q >/dev/null || die "apt-get update failed"
    # shellcheck disable=SC2086 # one word per package
    timeout 900 apt-get install -y -q --no-install-recommends $packages >/dev/null \
        || die "apt-get install $packages failed"
fi
exec python3 "$BENCH_DIR/bench.py" "$@"

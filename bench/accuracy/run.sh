#!/usr/bin/env bash
# bench/accuracy/run.sh — how far the sliding window counter strays from the exact sliding log.
#
# One invocation, on loopback only:
#   1. builds the replay (examples/accuracy_replay/, the crate's own RedisStore and scripts);
#   2. starts a private redis-server on a free port (nothing saved to disk);
#   3. replays a bursty synthetic trace through both algorithms, each request at its own
#      instant (explicit clock), and prints a Markdown table and PASS/FAIL lines.
# The redis-server it starts is stopped on exit, on failure and on Ctrl-C.
#
# Knobs: BENCH_KEYS (4000), BENCH_WINDOWS (8), BENCH_LIMIT (50), BENCH_WINDOW_SECS (60),
#        BENCH_TICK_MS (10), BENCH_MEDIAN_SHARE (0.2), BENCH_BURST_CHANCE (0.15), BENCH_SEED (7),
#        BENCH_PROFILE (release; "dev" builds faster and replays slower).
# The limit obeys the config's bounds: a sliding_log limit holds at most 10,000, the counter's
# limit * window (in microseconds) stays below 2^53, windows are 1 s .. 366 d here.

set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
log() { printf '[accuracy] %s\n' "$*" >&2; }
die() { printf '[accuracy] ERROR: %s\n' "$*" >&2; exit 1; }

command -v redis-server >/dev/null 2>&1 || die "missing redis-server (apt-get install redis-server)"

KEYS=${BENCH_KEYS:-4000} WINDOWS=${BENCH_WINDOWS:-8} LIMIT=${BENCH_LIMIT:-50}
WINDOW_SECS=${BENCH_WINDOW_SECS:-60} TICK_MS=${BENCH_TICK_MS:-10} SEED=${BENCH_SEED:-7}
for knob in KEYS WINDOWS LIMIT WINDOW_SECS TICK_MS SEED; do
    [[ ${!knob} =~ ^[0-9]+$ ]] || die "BENCH_$knob must be a whole number, got '${!knob}'"
done
((KEYS >= 1 && WINDOWS >= 1 && TICK_MS >= 1)) || die "BENCH_KEYS, BENCH_WINDOWS, BENCH_TICK_MS must be at least 1"
((LIMIT >= 1 && LIMIT <= 10000)) || die "BENCH_LIMIT must be 1..10000 (a sliding_log limit holds at most 10,000)"
((WINDOW_SECS >= 1 && WINDOW_SECS <= 366 * 86400)) || die "BENCH_WINDOW_SECS must be 1..31622400 (366 d)"
((LIMIT * WINDOW_SECS * 1000000 < 2 ** 53)) \
    || die "BENCH_LIMIT * BENCH_WINDOW_SECS in microseconds must stay below 2^53 (the counter's bound)"

PROFILE=${BENCH_PROFILE:-release}
case $PROFILE in
    release) BIN=$ROOT/target/release/examples/accuracy_replay ;;
    dev) BIN=$ROOT/target/debug/examples/accuracy_replay ;;
    *) die "BENCH_PROFILE is release or dev, not $PROFILE" ;;
esac

TMP=""
REDIS_PID=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -n $REDIS_PID ]]; then
        kill -TERM "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
    fi
    if [[ -n $TMP && -d $TMP ]]; then
        if ((rc != 0)) && [[ -s $TMP/redis.log ]]; then tail -n 20 "$TMP/redis.log" >&2; fi
        rm -rf "$TMP"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

started=$SECONDS
log "building the replay ($PROFILE)"
cargo build --profile "$PROFILE" --example accuracy_replay --quiet || die "cargo build failed"

free_port() { # a loopback port nobody listens on
    local p
    for ((i = 0; i < 200; i++)); do
        p=$((20000 + RANDOM % 20000))
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
    done
    die "no free port"
}

TMP=$(mktemp -d -t slidegate-accuracy.XXXXXX)
PORT=$(free_port)
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP" \
    >"$TMP/redis.log" 2>&1 &
REDIS_PID=$!
for ((i = 0; i < 100; i++)); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
    sleep 0.05
done
(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null || die "redis-server did not start on $PORT"
log "redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:$PORT"

"$BIN" --port "$PORT" \
    --keys "$KEYS" --windows "$WINDOWS" --limit "$LIMIT" --window-secs "$WINDOW_SECS" --tick-ms "$TICK_MS" \
    --median-share "${BENCH_MEDIAN_SHARE:-0.2}" --burst-chance "${BENCH_BURST_CHANCE:-0.15}" --seed "$SEED"

log "done in $((SECONDS - started)) s (build included)"

#!/usr/bin/env bash
# bench/campaign/run.sh — a 10-million-user frequency-capped campaign through the batch API.
#
# One invocation, on loopback only:
#   1. builds the release binaries and the data generator (examples/campaign_data.rs);
#   2. generates (once, cached under target/bench-campaign/) a user base of 270 million ids in
#      four segments (roaring bitmaps) and a campaign of 10 million distinct ids drawn from it;
#   3. starts a private redis-server and slidegate with a route capped per day and per week,
#      with per-segment values, and prints `slidegate check` (bitmap memory, lookup cost);
#   4. for each algorithm (BENCH_ALGORITHMS, default "sliding_log sliding_window_counter"):
#      sends the whole campaign through `slidegate campaign` (POST /v1/decisions, 10,000 keys a
#      call), then measures Redis memory per user (INFO memory, MEMORY USAGE samples), then
#      runs redis-benchmark -P 16 EVALSHA of the same script (one decision a call, distinct users)
#      on the same Redis, and prints decisions/s of both and their ratio;
#   5. prints a Markdown table.
# Every process it starts is stopped on exit.
#
# Knobs: BENCH_USERS (270000000), BENCH_CAMPAIGN (10000000), BENCH_ALGORITHMS,
#        BENCH_IN_FLIGHT (4, calls in flight), BENCH_RB_REQUESTS (1000000, redis-benchmark calls).

set -euo pipefail
export LC_ALL=C

USERS=${BENCH_USERS:-270000000}
CAMPAIGN=${BENCH_CAMPAIGN:-10000000}
ALGORITHMS=${BENCH_ALGORITHMS:-sliding_log sliding_window_counter}
IN_FLIGHT=${BENCH_IN_FLIGHT:-4}
RB_REQUESTS=${BENCH_RB_REQUESTS:-1000000}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
log() { printf '[campaign] %s\n' "$*" >&2; }
die() { printf '[campaign] ERROR: %s\n' "$*" >&2; exit 1; }

TMP=""
PIDS=()
cleanup() {
    local rc=$? pid
    trap - EXIT INT TERM
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [[ -n $TMP && -d $TMP ]]; then
        if ((rc != 0)); then
            for f in "$TMP"/*.log; do [[ -s $f ]] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }; done
        fi
        rm -rf "$TMP"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for tool in redis-server redis-cli redis-benchmark curl; do
    command -v "$tool" >/dev/null 2>&1 || die "missing required tool: $tool (apt-get install redis-server redis-tools curl)"
done

log "building release binaries and the data generator"
cargo build --release --bins --example campaign_data --quiet || die "cargo build failed"
BIN=$ROOT/target/release

DATA=$ROOT/target/bench-campaign/$USERS-$CAMPAIGN
if [[ ! -s $DATA/campaign.roaring ]]; then
    log "generating $USERS users in 4 segments and a campaign of $CAMPAIGN ids (once; cached in $DATA)"
    "$BIN/examples/campaign_data" "$DATA" --users "$USERS" --campaign "$CAMPAIGN" >&2 \
        || die "data generation failed"
fi

TMP=$(mktemp -d -t slidegate-campaign.XXXXXX)
free_port() { # a loopback port nobody listens on
    local p
    for ((i = 0; i < 200; i++)); do
        p=$((20000 + RANDOM % 20000))
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
    done
    die "no free port"
}
REDIS_PORT=$(free_port)
GW_PORT=$(free_port)
ADMIN_PORT=$(free_port)
R() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }

# ticks PID: utime+stime of a process and all its threads, in clock ticks (/proc/PID/stat).
ticks() {
    local line rest
    local -a f
    read -r line <"/proc/$1/stat" || { echo 0; return; }
    rest=${line##*) } # comm may hold spaces; fields resume after ") "
    read -r -a f <<<"$rest"
    echo $((f[11] + f[12])) # fields 14 and 15: utime, stime
}
HZ=$(getconf CLK_TCK)
# children_ms: sets CHILD_MS to the CPU ms (user+sys) of the children this shell has reaped (the
# `times` builtin: it must run in this shell, not in a $(...) subshell).
children_ms() {
    local line re='^([0-9]+)m([0-9]+)\.([0-9]+)s ([0-9]+)m([0-9]+)\.([0-9]+)s$'
    times >"$TMP/times.out"
    { read -r _ && read -r line; } <"$TMP/times.out"
    [[ $line =~ $re ]] || { CHILD_MS=0; return; }
    CHILD_MS=$(( (10#${BASH_REMATCH[1]} * 60 + 10#${BASH_REMATCH[2]}) * 1000 + 10#${BASH_REMATCH[3]}
        + (10#${BASH_REMATCH[4]} * 60 + 10#${BASH_REMATCH[5]}) * 1000 + 10#${BASH_REMATCH[6]} ))
}

log "starting redis-server on 127.0.0.1:$REDIS_PORT"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP" \
    >"$TMP/redis.log" 2>&1 &
REDIS_PID=$!
PIDS+=($REDIS_PID)
for ((i = 0; i < 100; i++)); do [[ $(R ping 2>/dev/null) == PONG ]] && break; sleep 0.1; done
[[ $(R ping 2>/dev/null) == PONG ]] || die "redis-server did not start"

export SLIDEGATE_ADMIN_TOKEN="bench-$RANDOM$RANDOM"
config() { # config ALGORITHM PREFIX
    cat <<EOF
[server]
listen = "127.0.0.1:$GW_PORT"
[admin]
listen = "127.0.0.1:$ADMIN_PORT"
[store]
backend = "redis"
url = "redis://127.0.0.1:$REDIS_PORT"
key_prefix = "$2"
timeout = "500ms"
[upstreams.none]
url = "http://127.0.0.1:9"
[segments.new]
members_file = "$DATA/new.roaring"
[segments.active]
members_file = "$DATA/active.roaring"
[segments.dormant]
members_file = "$DATA/dormant.roaring"
[segments.vip]
members_file = "$DATA/vip.roaring"
[[routes]]
name = "campaign"
path = "/campaign"
upstream = "none"
key = ["header:X-User"]
access_log = false
  [[routes.limits]]
  name = "per-day"
  limit = 2
  window = "1d"
  algorithm = "$1"
    [routes.limits.segments]
    new = 2
    active = 4
    dormant = 1
    vip = 6
  [[routes.limits]]
  name = "per-week"
  limit = 5
  window = "7d"
  algorithm = "$1"
    [routes.limits.segments]
    new = 5
    active = 10
    dormant = 2
    vip = 20
EOF
}

# The script the gateway runs, for redis-benchmark: one decision a call, the same two limits.
script_of() {
    cat lua/prelude.lua "lua/$1.lua" lua/decide.lua
}

declare -A RATE TOTAL BYTES USAGE RB CPU_REDIS CPU_GW CPU_CLIENT
for alg in $ALGORITHMS; do
    prefix="camp-${alg//_/-}"
    config "$alg" "$prefix" >"$TMP/$alg.toml"
    if [[ $alg == "${ALGORITHMS%% *}" ]]; then
        "$BIN/slidegate" check --config "$TMP/$alg.toml" >"$TMP/check.out" 2>&1 \
            || { cat "$TMP/check.out" >&2; die "config invalid"; }
        grep -E "segment|lookup" "$TMP/check.out" | head -6 >&2
        LOOKUP=$(grep -o 'lookup [0-9]* ns' "$TMP/check.out" | awk '{print $2}')
        BITMAPS=$(grep -o 'ids in [0-9]* bytes' "$TMP/check.out" | awk '{print $3}')
    fi
    log "$alg: starting slidegate"
    SLIDEGATE_LOG=warn "$BIN/slidegate" --config "$TMP/$alg.toml" >"$TMP/gw-$alg.log" 2>&1 &
    gw=$!
    PIDS+=($gw)
    for ((i = 0; i < 100; i++)); do
        curl -fsS -o /dev/null "http://127.0.0.1:$ADMIN_PORT/readyz" 2>/dev/null && break
        sleep 0.1
    done
    before=$(R info memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }')
    log "$alg: sending $CAMPAIGN ids through POST /v1/decisions ($IN_FLIGHT calls in flight)"
    children_ms
    redis0=$(ticks "$REDIS_PID") gw0=$(ticks "$gw") client0=$CHILD_MS
    "$BIN/slidegate" campaign --config "$TMP/$alg.toml" --route campaign \
        --ids "$DATA/campaign.roaring" --in-flight "$IN_FLIGHT" >"$TMP/campaign-$alg.out" \
        || { cat "$TMP/campaign-$alg.out" >&2; die "campaign failed"; }
    children_ms
    redis1=$(ticks "$REDIS_PID") gw1=$(ticks "$gw") client1=$CHILD_MS
    # CPU microseconds per decision of each process (the client's includes reading the ids).
    CPU_REDIS[$alg]=$(((redis1 - redis0) * 1000000 / HZ * 10 / CAMPAIGN))
    CPU_GW[$alg]=$(((gw1 - gw0) * 1000000 / HZ * 10 / CAMPAIGN))
    CPU_CLIENT[$alg]=$(((client1 - client0) * 1000 * 10 / CAMPAIGN))
    cat "$TMP/campaign-$alg.out" >&2
    RATE[$alg]=$(awk '/^decided/ { gsub(/\(/, "", $7); print $7 }' "$TMP/campaign-$alg.out")
    TOTAL[$alg]=$(awk '/^decided/ { print $5 }' "$TMP/campaign-$alg.out")
    after=$(R info memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }')
    BYTES[$alg]=$(( (after - before) / CAMPAIGN ))
    # MEMORY USAGE of the keys of 200 users of the campaign (all the keys each user has).
    sample=0 n=0
    while read -r key; do
        u=$(R memory usage "$key" samples 0)
        sample=$((sample + ${u:-0}))
        n=$((n + 1))
    done < <(R --scan --pattern "$prefix:{campaign|*" | head -n 400)
    USAGE[$alg]=$((n > 0 ? sample / n : 0))
    kill -TERM "$gw"; wait "$gw" 2>/dev/null || true

    log "$alg: redis-benchmark -P 16 EVALSHA of the same script, $RB_REQUESTS calls"
    sha=$(R script load "$(script_of "$alg")")
    plan=(1 0 2 per-day 2 86400000000 per-week 5 604800000000 1 1 1)
    if [[ $alg == sliding_log ]]; then
        keys=(2 "rb:{u__rand_int__}:per-day" "rb:{u__rand_int__}:per-week")
    else
        keys=(1 "rb:{u__rand_int__}#swc")
    fi
    redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -P 16 -c 16 -n "$RB_REQUESTS" -r 270000000 -q \
        evalsha "$sha" "${keys[@]}" "" tok "${plan[@]}" >"$TMP/rb-$alg.out" 2>&1
    RB[$alg]=$(tr '\r' '\n' <"$TMP/rb-$alg.out" | awk '/requests per second/ { v = $(NF - 5) } END { print v }')
    R flushall >/dev/null
done

echo
echo "campaign: $CAMPAIGN distinct users of $USERS in 4 segments, limits per-day and per-week,"
echo "through POST /v1/decisions (10,000 keys a call, $IN_FLIGHT in flight) against one Redis"
echo "segments: ${BITMAPS:-?} bytes of roaring bitmaps for $USERS ids; lookup ${LOOKUP:-?} ns (slidegate check)"
echo
echo "| algorithm | decisions/s | total s | Redis bytes/user (INFO) | MEMORY USAGE/key | redis-benchmark -P 16 calls/s | ratio | CPU µs/decision: Redis, gateway, client |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for alg in $ALGORITHMS; do
    awk -v a="$alg" -v r="${RATE[$alg]}" -v t="${TOTAL[$alg]}" -v b="${BYTES[$alg]}" \
        -v u="${USAGE[$alg]}" -v rb="${RB[$alg]}" -v cr="${CPU_REDIS[$alg]}" \
        -v cg="${CPU_GW[$alg]}" -v cc="${CPU_CLIENT[$alg]}" 'BEGIN {
        printf "| %s | %.0f | %.1f | %d | %d | %.0f | %.2fx | %.1f, %.1f, %.1f |\n", a, r, t, b, u, rb,
            (rb > 0 ? r / rb : 0), cr / 10, cg / 10, cc / 10 }'
done

#!/usr/bin/env bash
# bench/campaign/run.sh — a 10-million-user frequency-capped campaign through the batch API.
#
# One invocation, on loopback only:
#   1. builds the release binaries, the data generator (examples/campaign_data.rs) and the
#      decision-call printer (examples/decision_call.rs);
#   2. generates (once, cached under target/bench-campaign/) a user base of 270 million ids in
#      four segments (roaring bitmaps) and a campaign of 10 million distinct ids drawn from it;
#   3. starts a private redis-server and slidegate with a route capped per day and per week,
#      with per-segment values, and prints `slidegate check` (bitmap memory, lookup cost);
#   4. for each variant (BENCH_ALGORITHMS, default "sliding_log sliding_window_counter gcra":
#      both limits with that algorithm; the log keeps ONE sorted set per user for both limits,
#      the counter and gcra one hash per user with a field per limit): sends the whole campaign
#      through `slidegate campaign` (POST /v1/decisions, 10,000 keys a call), then measures
#      Redis memory per user (INFO memory over the whole campaign, and MEMORY USAGE of every key
#      of a sample of users), then runs redis-benchmark -P 16 EVALSHA of the gateway's own
#      script with the same two limits (one decision a call, distinct users) on the same Redis,
#      and prints decisions/s of both and their ratio;
#   5. prints a Markdown table, one row per variant.
# Every process it starts is stopped on exit.
#
# Knobs: BENCH_USERS (270000000), BENCH_CAMPAIGN (10000000), BENCH_ALGORITHMS,
#        BENCH_IN_FLIGHT (4, calls in flight), BENCH_RB_REQUESTS (1000000, redis-benchmark calls),
#        BENCH_MEMORY_USERS (500, users whose keys MEMORY USAGE samples).
# Smallest smoke run: BENCH_USERS=100000 BENCH_CAMPAIGN=20000 BENCH_RB_REQUESTS=20000 bench/campaign/run.sh

set -euo pipefail
export LC_ALL=C

USERS=${BENCH_USERS:-270000000}
CAMPAIGN=${BENCH_CAMPAIGN:-10000000}
ALGORITHMS=${BENCH_ALGORITHMS:-sliding_log sliding_window_counter gcra}
IN_FLIGHT=${BENCH_IN_FLIGHT:-4}
RB_REQUESTS=${BENCH_RB_REQUESTS:-1000000}
MEMORY_USERS=${BENCH_MEMORY_USERS:-500}

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

for knob in USERS CAMPAIGN IN_FLIGHT RB_REQUESTS MEMORY_USERS; do
    [[ ${!knob} =~ ^[0-9]+$ && ${!knob} -ge 1 ]] || die "BENCH_$knob must be a whole number >= 1, got '${!knob}'"
done
((USERS <= 4294967295)) || die "BENCH_USERS: user ids are u32"
((CAMPAIGN <= USERS)) || die "BENCH_CAMPAIGN ($CAMPAIGN) cannot exceed BENCH_USERS ($USERS): the ids are distinct"
for alg in $ALGORITHMS; do
    case $alg in sliding_log | sliding_window_counter | gcra) ;;
    *) die "BENCH_ALGORITHMS: unknown algorithm '$alg' (sliding_log, sliding_window_counter, gcra)" ;;
    esac
done

for tool in redis-server redis-cli redis-benchmark curl; do
    command -v "$tool" >/dev/null 2>&1 || die "missing required tool: $tool (apt-get install redis-server redis-tools curl)"
done

log "building release binaries, the data generator and the decision-call printer"
cargo build --release --bins --example campaign_data --example decision_call --quiet || die "cargo build failed"
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
PIDS+=("$REDIS_PID")
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

# evalsha_failed: decision calls (EVALSHA and FCALL) Redis counted as failed so far (INFO
# commandstats).
evalsha_failed() {
    R info commandstats | tr -d '\r' | awk -F'[:=,]' '$1 == "cmdstat_evalsha" || $1 == "cmdstat_fcall" {
        for (i = 2; i < NF; i += 2) if ($i == "failed_calls") v += $(i + 1) } END { print v + 0 }'
}

# The script the gateway runs (one script for every algorithm), loaded for redis-benchmark.
"$BIN/examples/decision_call" script >"$TMP/decide.lua" || die "cannot print the decision script"

# bytes_per_user CONFIG PREFIX: "bytes keys" per user: MEMORY USAGE of every key of up to
# MEMORY_USERS users of the campaign (found with SCAN), the keys named as the gateway names
# them (examples/decision_call prints a user's keys), averaged over the users.
bytes_per_user() {
    local config=$1 prefix=$2 templates
    # The keys of one user, with @ID@ in place of the id (the id is its own key material).
    templates=$("$BIN/examples/decision_call" args "$config" campaign "$prefix" @ID@ tok \
        | awk 'NR == 1 { n = $1; next } NR <= n + 1 { print }') || die "cannot name a user's keys"
    # Users whose keys exist: the material between "|" and "}" of the first keys SCAN finds.
    R --scan --pattern "$prefix:{campaign|*" 2>/dev/null \
        | sed -n 's/^[^{]*{campaign|\([^}]*\)}.*$/\1/p' | awk '!seen[$0]++' \
        | head -n "$MEMORY_USERS" >"$TMP/users.txt" || true
    [[ -s $TMP/users.txt ]] || { echo "0 0"; return; }
    # One MEMORY USAGE per key of every sampled user, in one redis-cli session (a key that
    # does not exist answers nil, an empty line).
    awk -v t="$templates" 'BEGIN { n = split(t, tpl, "\n") }
        { for (i = 1; i <= n; i++) { k = tpl[i]; gsub(/@ID@/, $1, k); printf "MEMORY USAGE \"%s\" SAMPLES 0\n", k } }' \
        "$TMP/users.txt" | R >"$TMP/usage.txt" 2>&1 || die "MEMORY USAGE failed: $(head -n 3 "$TMP/usage.txt")"
    awk -v users="$(wc -l <"$TMP/users.txt")" '$1 ~ /^[0-9]+$/ { bytes += $1; keys++ }
        END { printf "%d %.2f\n", bytes / users, keys / users }' "$TMP/usage.txt"
}

declare -A RATE TOTAL DENIED BYTES USAGE KEYS_PER_USER RB CPU_REDIS CPU_GW CPU_CLIENT
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
    PIDS+=("$gw")
    for ((i = 0; ; i++)); do
        curl -fsS -o /dev/null "http://127.0.0.1:$ADMIN_PORT/readyz" 2>/dev/null && break
        kill -0 "$gw" 2>/dev/null || die "slidegate ($alg) exited during startup"
        ((i < 300)) || die "slidegate ($alg) not ready within 30 s"
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
    CPU_REDIS[$alg]=$(((redis1 - redis0) * 10000000 / HZ / CAMPAIGN))
    CPU_GW[$alg]=$(((gw1 - gw0) * 10000000 / HZ / CAMPAIGN))
    CPU_CLIENT[$alg]=$(((client1 - client0) * 1000 * 10 / CAMPAIGN))
    cat "$TMP/campaign-$alg.out" >&2
    RATE[$alg]=$(awk '/^decided/ { gsub(/\(/, "", $7); print $7 }' "$TMP/campaign-$alg.out")
    TOTAL[$alg]=$(awk '/^decided/ { print $5 }' "$TMP/campaign-$alg.out")
    DENIED[$alg]=$(awk '/^decided/ { for (i = 1; i < NF; i++) if ($(i + 1) ~ /^refused/) print $i }' "$TMP/campaign-$alg.out")
    [[ -n ${RATE[$alg]} && -n ${TOTAL[$alg]} ]] || die "could not read the campaign's report"
    # Every user is messaged once and every segment allows at least one a day: nothing is refused.
    [[ ${DENIED[$alg]:-0} == 0 ]] || log "WARN: $alg: ${DENIED[$alg]} users refused; expected none"
    after=$(R info memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }')
    BYTES[$alg]=$(( (after - before) / CAMPAIGN ))
    read -r "USAGE[$alg]" "KEYS_PER_USER[$alg]" <<<"$(bytes_per_user "$TMP/$alg.toml" "$prefix")"
    kill -TERM "$gw"
    wait "$gw" 2>/dev/null || true
    PIDS=("$REDIS_PID") # the gateway is stopped; only Redis is left to stop on exit

    log "$alg: redis-benchmark -P 16 EVALSHA of the same script, $RB_REQUESTS calls"
    sha=$(R -x script load <"$TMP/decide.lua" | tr -d '\r')
    [[ $sha =~ ^[0-9a-f]{40}$ ]] || die "SCRIPT LOAD of the decision script failed: $sha"
    # The gateway's call for one user alone: KEYS and ARGV as examples/decision_call prints them,
    # the user and the call's token drawn at random by redis-benchmark.
    mapfile -t call < <("$BIN/examples/decision_call" args "$TMP/$alg.toml" campaign rb 'u__rand_int__' 't__rand_int__.')
    ((${#call[@]} > 2)) || die "cannot encode a decision for redis-benchmark"
    failed0=$(evalsha_failed)
    redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -P 16 -c 16 -n "$RB_REQUESTS" -r "$USERS" -q \
        evalsha "$sha" "${call[@]}" >"$TMP/rb-$alg.out" 2>&1 || { cat "$TMP/rb-$alg.out" >&2; die "redis-benchmark failed"; }
    failed=$(($(evalsha_failed) - failed0))
    ((failed == 0)) || die "redis-benchmark: $failed EVALSHA calls failed"
    RB[$alg]=$(tr '\r' '\n' <"$TMP/rb-$alg.out" | awk '/requests per second/ { v = $(NF - 5) } END { print v }')
    R flushall >/dev/null
done

echo
echo "campaign: $CAMPAIGN distinct users of $USERS in 4 segments, limits per-day and per-week,"
echo "through POST /v1/decisions (10,000 keys a call, $IN_FLIGHT in flight) against one Redis"
echo "segments: ${BITMAPS:-?} bytes of roaring bitmaps for $USERS ids; lookup ${LOOKUP:-?} ns (slidegate check)"
echo "bytes/user: INFO used_memory growth over the campaign / users; MEMORY USAGE: every key of up to"
echo "$MEMORY_USERS users (keys/user: how many keys a user has)"
echo
echo "| algorithm | decisions/s | total s | Redis bytes/user (INFO) | MEMORY USAGE/user | keys/user | redis-benchmark -P 16 calls/s | ratio | CPU µs/decision: Redis, gateway, client |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for alg in $ALGORITHMS; do
    awk -v a="$alg" -v r="${RATE[$alg]}" -v t="${TOTAL[$alg]}" -v b="${BYTES[$alg]}" \
        -v u="${USAGE[$alg]}" -v k="${KEYS_PER_USER[$alg]}" -v rb="${RB[$alg]:-0}" -v cr="${CPU_REDIS[$alg]}" \
        -v cg="${CPU_GW[$alg]}" -v cc="${CPU_CLIENT[$alg]}" 'BEGIN {
        printf "| %s | %.0f | %.1f | %d | %d | %s | %.0f | %.2fx | %.1f, %.1f, %.1f |\n", a, r, t, b, u, k, rb,
            (rb > 0 ? r / rb : 0), cr / 10, cg / 10, cc / 10 }'
done

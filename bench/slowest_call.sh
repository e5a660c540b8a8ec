#!/usr/bin/env bash
# bench/slowest_call.sh — the slowest script call any accepted input can cause.
#
# The bounds of the README's "Which algorithm" and "Admin listener" (a sliding_log limit at most 10,000, a batch cost at most
# the route's smallest limit, at most 10,000 keys per batch) cap how much work one EVALSHA can
# do. This runs the worst inputs those bounds still accept against a real Redis through the
# release gateway and prints, per case, the batch call's time and the longest EVALSHA Redis
# recorded in its SLOWLOG (every call is logged: slowlog-log-slower-than 0):
#
#   fresh-cost1       10,000 new keys, cost 1 (the campaign's shape)
#   fresh-costmax     100 new keys, cost 10,000 (each key gets 10,000 entries at once; a call
#                     carries at most 20,000 units, so more keys make more calls, not longer
#                     ones, and 10,000 such keys would only fill Redis with 10^8 entries)
#   refused-costmax   the same keys again, cost 10,000 (every key full: all refused)
#   hot-costmax       one key, cost 10,000, twice (the second call refused)
#
# The route has two sliding_log limits of 10,000 (per minute and per hour), the largest a
# sliding_log limit may be. Usage: bench/slowest_call.sh (needs redis-server, redis-cli, curl,
# python3; builds the release binary).
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in redis-server redis-cli curl python3; do
    command -v "$tool" >/dev/null || {
        echo "slowest_call: $tool is required" >&2
        exit 1
    }
done
cargo build --release --quiet --bin slidegate
BIN=target/release/slidegate

WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
REDIS_PORT=$(free_port)
ADMIN_PORT=$(free_port)
PROXY_PORT=$(free_port)

redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --slowlog-log-slower-than 0 --slowlog-max-len 100000 >"$WORK/redis.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
    redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break
    sleep 0.1
done

cat >"$WORK/gw.toml" <<EOF
[server]
listen = "127.0.0.1:$PROXY_PORT"

[admin]
listen = "127.0.0.1:$ADMIN_PORT"
token_env = "SLOWEST_TOKEN"

[store]
backend = "redis"
url = "redis://127.0.0.1:$REDIS_PORT"
timeout = "30s"

[upstreams.none]
url = "http://127.0.0.1:9"

[[routes]]
name = "campaign"
path = "/campaign"
upstream = "none"
key = ["header:x-user"]

[[routes.limits]]
name = "per-minute"
algorithm = "sliding_log"
limit = 10000
window = "1m"

[[routes.limits]]
name = "per-hour"
algorithm = "sliding_log"
limit = 10000
window = "1h"
EOF
export SLOWEST_TOKEN=slowest
"$BIN" --config "$WORK/gw.toml" >"$WORK/gw.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null 2>&1 && break
    sleep 0.1
done

# body N COST PREFIX: a batch body of N keys PREFIX0..PREFIX(N-1).
body() {
    python3 -c 'import json,sys; n,c,p=int(sys.argv[1]),int(sys.argv[2]),sys.argv[3]
print(json.dumps({"route":"campaign","keys":[f"{p}{i}" for i in range(n)],"cost":c}))' "$@"
}

# slowest: the longest decision call (EVALSHA or FCALL) in the SLOWLOG since the last reset, in
# microseconds.
slowest() {
    redis-cli -p "$REDIS_PORT" --json slowlog get 100000 | python3 -c '
import json, sys
entries = json.load(sys.stdin)
print(max((e[2] for e in entries if e[3] and e[3][0].upper() in ("EVALSHA", "FCALL")), default=0))'
}

# run NAME N COST PREFIX
run() {
    body "$2" "$3" "$4" >"$WORK/body.json"
    redis-cli -p "$REDIS_PORT" slowlog reset >/dev/null
    local t answer
    t=$(curl -s -o "$WORK/answer.json" -w '%{time_total}' \
        -H "Authorization: Bearer $SLOWEST_TOKEN" -H 'Content-Type: application/json' \
        --data-binary "@$WORK/body.json" "http://127.0.0.1:$ADMIN_PORT/v1/decisions")
    answer=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"]
print(sum(x["allowed"] for x in r), len(r))' "$WORK/answer.json")
    printf '| %s | %s | %s | %s of %s | %.0f | %s |\n' "$1" "$2" "$3" ${answer% *} ${answer#* } \
        "$(python3 -c "print($t*1000)")" "$(slowest)"
}

echo "| case | keys | cost | allowed | call ms | slowest EVALSHA us |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
run fresh-cost1 10000 1 a
run fresh-costmax 100 10000 b
run refused-costmax 100 10000 b
run hot-costmax 1 10000 h
run hot-costmax-again 1 10000 h
echo "redis memory: $(redis-cli -p "$REDIS_PORT" info memory | grep '^used_memory_human' | tr -d '\r')"

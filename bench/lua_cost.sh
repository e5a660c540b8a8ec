#!/usr/bin/env bash
# What one decision costs inside Redis, in machine instructions: a redis-server started here
# (a free port, no persistence) runs under `valgrind --tool=callgrind`, and bench/lua_cost.py
# sends it a fixed number of decision calls exactly as the gateway makes them, of the
# campaign's plan (two sliding_log limits per user: 2 a day and 5 a week, one sorted set),
# once with the script (EVALSHA) and once with the Functions library (FCALL), on one hot user
# and on distinct users. Callgrind's counters are zeroed before each run and dumped after it;
# the instructions per decision are the run's total over its decisions. Redis's own time
# (`INFO commandstats` usec_per_call, under valgrind, so only the ratio means something) is
# printed beside them.
#
# usage: bench/lua_cost.sh                       (LUA_COST_CALLS, default 20000 calls a run;
#                                                 LUA_COST_BATCH, default 1 decision a call;
#                                                 LUA_COST_BEFORE, a script file of another
#                                                 version, `decision_call script` there, run
#                                                 with EVALSHA as a third path, "before")
set -euo pipefail

CALLS=${LUA_COST_CALLS:-20000}
BATCH=${LUA_COST_BATCH:-1}
BEFORE=${LUA_COST_BEFORE:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d)
PID=
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
die() { echo "lua_cost.sh: $*" >&2; exit 1; }

command -v valgrind >/dev/null || die "valgrind is not installed"
command -v redis-server >/dev/null || die "redis-server is not installed"

cd "$ROOT"
cargo build --example decision_call --quiet || die "cargo build failed"
BIN="$ROOT/target/debug/examples/decision_call"

cat >"$TMP/plan.toml" <<'EOF'
[upstreams.up]
url = "http://127.0.0.1:1"

[[routes]]
name = "campaign"
path = "/*"
upstream = "up"
  [[routes.limits]]
  name = "per-day"
  limit = 2
  window = "1d"
  [[routes.limits]]
  name = "per-week"
  limit = 5
  window = "7d"
EOF
"$BIN" args "$TMP/plan.toml" campaign lc @ID@ tok >"$TMP/call.txt"
"$BIN" script >"$TMP/decide.lua"
"$BIN" library >"$TMP/library.lua"
FUNCTION=$("$BIN" function)

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
valgrind --tool=callgrind --callgrind-out-file="$TMP/cg.out" \
    redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
    >"$TMP/valgrind.log" 2>&1 &
PID=$!
cli() { redis-cli -p "$PORT" "$@"; }
for _ in $(seq 1 200); do
    [ "$(cli PING 2>/dev/null)" = PONG ] && break
    sleep 0.1
done
[ "$(cli PING 2>/dev/null)" = PONG ] || die "redis-server did not start under valgrind"

SHA=$(cli -x SCRIPT LOAD <"$TMP/decide.lua")
cli -x FUNCTION LOAD REPLACE <"$TMP/library.lua" >/dev/null
PATHS="eval functions"
if [ -n "$BEFORE" ]; then
    BEFORE_SHA=$(cli -x SCRIPT LOAD <"$BEFORE")
    PATHS="before $PATHS"
fi

# Instructions counted since the last zeroing, dumped now.
instructions() {
    rm -f "$TMP"/cg.out.*
    callgrind_control -d "$PID" >/dev/null 2>&1
    local dump
    dump=$(ls "$TMP"/cg.out.* 2>/dev/null | head -1)
    [ -n "$dump" ] || die "callgrind wrote no dump"
    awk '/^(summary|totals):/ { print $2; exit }' "$dump"
}

usec_per_call() {
    cli INFO commandstats | tr -d '\r' |
        awk -F'usec_per_call=' -v c="cmdstat_$1:" 'index($0, c) == 1 { split($2, a, ","); print a[1] }'
}

echo "calls a run: $CALLS, decisions a call: $BATCH (plan: sliding_log 2/day + 5/week, one set per user)"
echo
echo "| path | users | instructions per decision | usec_per_call (under valgrind) |"
echo "| --- | --- | ---: | ---: |"
for shape in hot distinct; do
    for path in $PATHS; do
        case $path in
        before) kind=eval code=$BEFORE_SHA command=evalsha ;;
        eval) kind=eval code=$SHA command=evalsha ;;
        functions) kind=functions code=$FUNCTION command=fcall ;;
        esac
        cli FLUSHALL >/dev/null
        # warm: the library is made on its first call, the allocator's pages are touched
        python3 bench/lua_cost.py "$PORT" "$kind" "$code" "$TMP/call.txt" "$shape" 20 "$BATCH"
        cli FLUSHALL >/dev/null
        cli CONFIG RESETSTAT >/dev/null
        callgrind_control -z "$PID" >/dev/null 2>&1
        python3 bench/lua_cost.py "$PORT" "$kind" "$code" "$TMP/call.txt" "$shape" "$CALLS" "$BATCH"
        total=$(instructions)
        echo "| $path | $shape | $((total / (CALLS * BATCH))) | $(usec_per_call $command) |"
    done
done

#!/usr/bin/env bash
# bench/faults/run.sh — what clients see while the store or the upstream fails under load.
#
# Faults (bench/faults/README.md has the method, the definitions and the figures):
#   redis-restart      one Redis (appendonly, appendfsync always) killed with SIGKILL, started
#                      again FAULTS_DOWN seconds later on the same port and files
#   sentinel-failover  a master, one replica, three sentinels (down-after-milliseconds 1000);
#                      the master killed, the sentinels promote the replica; the gateway uses
#                      redis-sentinel://S1,S2,S3/mymaster and must follow the new master
#   cluster-reshard    three masters; redis-cli --cluster reshard moves FAULTS_RESHARD_SLOTS
#                      slots, starting with slot 0, which holds the hot keys, from one master
#                      to another while the load runs; MOVED and ASK counted on the nodes
#   cluster-failover   three masters with a replica each (cluster-node-timeout
#                      FAULTS_NODE_TIMEOUT ms); the master of the hot key killed, its replica
#                      promoted
#   upstream-restart   the demo upstream killed with SIGKILL, started again FAULTS_DOWN s later
#
# One invocation, on loopback only: installs wrk with apt-get when missing, builds the release
# binaries (cargo build --release) and the load generator (bench/faults/loadgen), then per fault
#   1. starts its own Redis topology, the demo upstream and the gateway on free ports; the
#      gateway has two routes keyed by an X-User header, `allow` (on_error = "allow") and `deny`
#      (on_error = "deny"), each with a sliding_log limit never reached (FAULTS_LIMIT per hour),
#      so every request the store allows stays in Redis for the count check;
#   2. measures the peak with wrk (FAULTS_PEAK_SECONDS, bench/faults/peak.lua: both routes,
#      FAULTS_USERS keys of their own);
#   3. runs the load generator at half that peak for FAULTS_SECONDS (FAULTS_USERS keys and hot
#      keys on both routes), injecting the fault FAULTS_AT seconds in; every request is
#      recorded with its start time and outcome;
#   4. reads the gateway's /metrics, every key's ZCARD on the (new) masters, and for the
#      cluster faults the nodes' INFO errorstats (MOVED, ASK), then prints the per-second chart
#      and the figures; at the end a Markdown table of every fault.
# Every process it starts is stopped on exit, including on failure or Ctrl-C.
#
# Usage: bench/faults/run.sh [FAULT...]     (from any directory; root only to install wrk)
#   FAULT... (or FAULTS="redis-restart upstream-restart") selects faults; default: all.
# Knobs (environment, defaults in brackets): FAULTS_SECONDS [24] length of the loaded run,
#   FAULTS_AT [6] when the fault starts, FAULTS_DOWN [3] how long a killed process stays down in
#   the restart faults, FAULTS_PEAK_SECONDS [5], FAULTS_CONNS [32] connections of wrk and of the
#   load generator, FAULTS_RATE [half the peak] a fixed rate instead, FAULTS_USERS [4000],
#   FAULTS_LIMIT [10000] the never-reached limit per key and hour, FAULTS_STORE_TIMEOUT [50ms],
#   FAULTS_NODE_TIMEOUT [1000] cluster-node-timeout ms, FAULTS_RESHARD_SLOTS [2000],
#   FAULTS_RESHARD_HOT_SHARE [0.2] share of requests on the 50 hot keys of slot 0 during the
#   reshard, FAULTS_AOF [always] appendfsync of redis-restart ("no": no persistence at all, so
#   the restart loses every count), FAULTS_REPLICA_ACKS [0] store.replica_acks of the gateway in
#   the faults whose masters have replicas (sentinel-failover, cluster-failover), FAULTS_COVERAGE
#   [no] cluster-require-full-coverage of the cluster nodes ("yes", Redis's default, makes every
#   node refuse every command from the moment the dead master is marked failed until its
#   replica is promoted), FAULTS_RUNS [1] runs of each selected fault (a row each),
#   FAULTS_GATEWAY_BIN [target/release/slidegate] another gateway binary to run (an A/B against
#   an older build), FAULTS_KEEP [0] 1 keeps the work directory (logs, raw records) and prints
#   where it is.

set -euo pipefail
export LC_ALL=C
START_TIME=$(date +%s)

ALL_FAULTS=(redis-restart sentinel-failover cluster-reshard cluster-failover upstream-restart)
ARG_FAULTS=()
for arg in "$@"; do
    case $arg in
    -h | --help)
        sed -n '2,/^$/{s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
        exit 0
        ;;
    -*)
        printf '[faults] ERROR: unknown option %s (see --help)\n' "$arg" >&2
        exit 2
        ;;
    *) ARG_FAULTS+=("$arg") ;;
    esac
done

SECONDS_RUN=${FAULTS_SECONDS:-24}
FAULT_AT=${FAULTS_AT:-6}
DOWN=${FAULTS_DOWN:-3}
PEAK_SECONDS=${FAULTS_PEAK_SECONDS:-5}
CONNS=${FAULTS_CONNS:-32}
FIXED_RATE=${FAULTS_RATE:-}
USERS=${FAULTS_USERS:-4000}
LIMIT=${FAULTS_LIMIT:-10000}
STORE_TIMEOUT=${FAULTS_STORE_TIMEOUT:-50ms}
NODE_TIMEOUT=${FAULTS_NODE_TIMEOUT:-1000}
RESHARD_SLOTS=${FAULTS_RESHARD_SLOTS:-2000}
RESHARD_HOT_SHARE=${FAULTS_RESHARD_HOT_SHARE:-0.2}
AOF=${FAULTS_AOF:-always}
REPLICA_ACKS=${FAULTS_REPLICA_ACKS:-0}
COVERAGE=${FAULTS_COVERAGE:-no}
RUNS=${FAULTS_RUNS:-1}
KEEP=${FAULTS_KEEP:-0}
export FAULTS_USERS=$USERS # read by bench/faults/peak.lua inside wrk

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

log() { printf '[faults] %s\n' "$*" >&2; }
die() { printf '[faults] ERROR: %s\n' "$*" >&2; exit 1; }

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
for knob in SECONDS_RUN:SECONDS FAULT_AT:AT DOWN PEAK_SECONDS CONNS USERS LIMIT NODE_TIMEOUT \
    RESHARD_SLOTS REPLICA_ACKS RUNS; do
    var=${knob%%:*} env_name=FAULTS_${knob#*:}
    is_uint "${!var}" || die "$env_name must be a whole number, got '${!var}'"
done
((SECONDS_RUN >= FAULT_AT + DOWN + 4)) || die "FAULTS_SECONDS must leave 4 s after FAULTS_AT + FAULTS_DOWN"
((FAULT_AT >= 2 && PEAK_SECONDS >= 1 && CONNS >= 1 && USERS >= 1)) || die "FAULTS_AT >= 2, others >= 1"
((LIMIT >= 1 && LIMIT <= 10000)) || die "FAULTS_LIMIT must be 1..10000 (a sliding_log limit's maximum)"
((RESHARD_SLOTS >= 1 && RESHARD_SLOTS <= 5000)) || die "FAULTS_RESHARD_SLOTS must be 1..5000"
[[ -z $FIXED_RATE ]] || is_uint "$FIXED_RATE" || die "FAULTS_RATE must be a whole number"
[[ $AOF == always || $AOF == no ]] || die "FAULTS_AOF must be 'always' or 'no'"
[[ $COVERAGE == yes || $COVERAGE == no ]] || die "FAULTS_COVERAGE must be 'yes' or 'no'"
((REPLICA_ACKS <= 16)) || die "FAULTS_REPLICA_ACKS must be 0..16"
((RUNS >= 1 && RUNS <= 20)) || die "FAULTS_RUNS must be 1..20"
[[ $STORE_TIMEOUT =~ ^[0-9]+(ms|s)$ ]] || die "FAULTS_STORE_TIMEOUT must be like 50ms or 1s"

requested=()
if ((${#ARG_FAULTS[@]})); then
    requested=("${ARG_FAULTS[@]}")
elif [[ -n ${FAULTS:-} ]]; then
    read -r -a requested <<<"$FAULTS"
else
    requested=("${ALL_FAULTS[@]}")
fi
for f in "${requested[@]}"; do
    [[ " ${ALL_FAULTS[*]} " == *" $f "* ]] || die "unknown fault '$f' (known: ${ALL_FAULTS[*]})"
done

# ---------------------------------------------------------------- cleanup
TMP=""
PIDS=()       # every background process, in start order
FAULT_PIDS=() # the current fault's
CHILD=""      # the current foreground step (cargo, wrk, redis-cli --cluster), see run_fg
exec 9>&2
stop_pids() { # stop_pids PID...: TERM, up to 5 s, then KILL, each reaped
    local pid i
    for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "$@"; do
        for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
}
cleanup() {
    local rc=$? order=() i
    trap - EXIT INT TERM
    exec 2>&9
    ((rc == 130 || rc == 143)) && log "interrupted, stopping everything"
    [[ -n $CHILD ]] && order+=("$CHILD")
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do order+=("${PIDS[i]}"); done
    ((${#order[@]})) && stop_pids "${order[@]}"
    if [[ -n $TMP && -d $TMP ]]; then
        if ((rc != 0 && rc != 130 && rc != 143)); then
            for f in "$TMP"/*/*.log; do
                [[ -s $f ]] || continue
                printf '[faults] --- %s (tail) ---\n' "${f#"$TMP"/}" >&2
                tail -n 15 "$f" >&2 || true
            done
        fi
        if [[ $KEEP == 1 ]]; then log "work directory kept: $TMP"; else rm -rf "$TMP"; fi
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

run_fg() { # runs CMD so that INT/TERM interrupt at once
    local rc=0
    "$@" &
    CHILD=$!
    wait "$CHILD" || rc=$?
    CHILD=""
    return "$rc"
}

# ---------------------------------------------------------------- tools and build
if ! command -v wrk >/dev/null 2>&1; then
    log "installing wrk with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    timeout 600 apt-get update -q >/dev/null || die "apt-get update failed"
    timeout 900 apt-get install -y -q --no-install-recommends wrk >/dev/null || die "apt-get install wrk failed"
fi
for tool in wrk redis-server redis-cli curl cargo timeout awk; do
    command -v "$tool" >/dev/null 2>&1 || die "missing required tool: $tool"
done
log "building release binaries (cargo build --release) and the load generator"
run_fg timeout 1800 cargo build --release --bins --quiet || die "cargo build failed"
run_fg timeout 900 cargo build --release --quiet --manifest-path "$ROOT/bench/faults/loadgen/Cargo.toml" \
    --target-dir "$ROOT/target/faults-load" || die "building bench/faults/loadgen failed"
GATEWAY_BIN=${FAULTS_GATEWAY_BIN:-$ROOT/target/release/slidegate}
UPSTREAM_BIN=$ROOT/target/release/demo-upstream
LOAD_BIN=$ROOT/target/faults-load/release/faults-load
for b in "$GATEWAY_BIN" "$UPSTREAM_BIN" "$LOAD_BIN"; do [[ -x $b ]] || die "$b not built"; done

TMP=$(mktemp -d -t slidegate-faults.XXXXXX)
ROWS=$TMP/rows.md
CHARTS=$TMP/charts.md
: >"$ROWS"
: >"$CHARTS"

# ---------------------------------------------------------------- ports
# Free ports lie below the kernel's ephemeral range (outgoing connections may hold any port in
# it); a cluster node's bus port (port + 10000) must be free and below it too.
read -r EPH_LO _ 2>/dev/null </proc/sys/net/ipv4/ip_local_port_range || EPH_LO=32768
PORT_LO=10000 PORT_HI=$((EPH_LO - 1))
((PORT_HI - 10000 - PORT_LO >= 200)) || die "the ephemeral port range starts too low ($EPH_LO)"
TAKEN=" "
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pick_port() { # pick_port VAR [cluster]: a free port (and its bus port) into VAR
    local _p _tries _hi=$PORT_HI
    [[ ${2:-} == cluster ]] && _hi=$((PORT_HI - 10000))
    _p=$((PORT_LO + RANDOM % (_hi - PORT_LO + 1)))
    for ((_tries = 0; _tries < 1000; _tries++, _p++)); do
        ((_p > _hi)) && _p=$PORT_LO
        [[ $TAKEN == *" $_p "* || $TAKEN == *" $((_p + 10000)) "* ]] && continue
        port_free "$_p" || continue
        if [[ ${2:-} == cluster ]]; then port_free $((_p + 10000)) || continue; fi
        TAKEN+="$_p $((_p + 10000)) "
        printf -v "$1" '%s' "$_p"
        return 0
    done
    die "no free loopback port found"
}

# ---------------------------------------------------------------- processes
declare -A PID_OF=()
start() { # start NAME CMD...: CMD in the background, output to $FDIR/NAME.log
    local name=$1
    shift
    "$@" >>"$FDIR/$name.log" 2>&1 &
    PIDS+=($!)
    FAULT_PIDS+=($!)
    PID_OF[$name]=$!
}
now_ms() { date +%s%3N; }
event() { echo "$(now_ms) $*" >>"$FDIR/events"; log "event: $*"; }
sleep_until() { # sleep_until EPOCH_MS
    local d=$(($1 - $(now_ms)))
    ((d > 0)) && sleep "$(printf '%d.%03d' $((d / 1000)) $((d % 1000)))"
    return 0
}
rcli() { local p=$1; shift; timeout 5 redis-cli -h 127.0.0.1 -p "$p" "$@"; }
# wait_for SECONDS WHAT CMD...: bounded retry of CMD every 50 ms
wait_for() {
    local limit=$(($1 * 20)) what=$2 i
    shift 2
    for ((i = 0; i < limit; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    die "$what: not within ${limit} tries"
}
answers_pong() { [[ $(rcli "$1" ping 2>/dev/null) == PONG ]]; }
is_master() { [[ $(rcli "$1" role 2>/dev/null | head -n 1) == master ]]; }
replica_linked() { rcli "$1" info replication 2>/dev/null | grep -q '^master_link_status:up'; }
cluster_ok() { rcli "$1" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; }
port_open() { ! port_free "$1"; }

# redis_start NAME PORT EXTRA...: redis-server on 127.0.0.1:PORT, files in $FDIR/NAME, waits
# for PONG. Started again with the same NAME, it reuses its files.
redis_start() {
    local name=$1 port=$2
    shift 2
    mkdir -p "$FDIR/$name"
    start "$name" redis-server --port "$port" --bind 127.0.0.1 --daemonize no --dir "$FDIR/$name" \
        --save "" --appendonly no "$@"
    wait_for 20 "$name answers PING on $port" answers_pong "$port"
}
cluster_args() {
    echo --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout "$NODE_TIMEOUT" \
        --cluster-require-full-coverage "$COVERAGE"
}

# ---------------------------------------------------------------- one fault
# zcard_dump PORT...: "KEY ZCARD" of every sliding_log set of this fault on those servers.
zcard_dump() {
    local p keys
    for p in "$@"; do
        keys=$(rcli "$p" --scan --pattern "$PREFIX:*#log") || die "SCAN on $p failed"
        [[ -n $keys ]] || continue
        paste -d' ' <(printf '%s\n' "$keys") <(printf '%s\n' "$keys" | sed 's/^/ZCARD /' | timeout 60 redis-cli -h 127.0.0.1 -p "$p")
    done
}
errorstat() { # errorstat NAME PORT...: the sum of errorstat_NAME counts
    local p n=0 c
    for p in "${@:2}"; do
        c=$(rcli "$p" info errorstats 2>/dev/null | tr -d '\r' | sed -n "s/^errorstat_$1:count=//p")
        n=$((n + ${c:-0}))
    done
    echo "$n"
}

gw_config() {
    # replica_acks only where the masters have replicas, and only when set (an older gateway
    # given as FAULTS_GATEWAY_BIN does not know it).
    local acks=""
    [[ ($FAULT == sentinel-failover || $FAULT == cluster-failover) && $REPLICA_ACKS != 0 ]] \
        && acks="replica_acks = $REPLICA_ACKS"
    cat >"$FDIR/gateway.toml" <<EOF
# Generated by bench/faults/run.sh for the $FAULT fault.
[server]
listen = "127.0.0.1:$GW_PORT"

[admin]
listen = "127.0.0.1:$ADMIN_PORT"

[store]
backend = "redis"
url = "$STORE_URL"
timeout = "$STORE_TIMEOUT"
on_error = "allow"
key_prefix = "$PREFIX"
$acks

[upstreams.demo]
url = "http://127.0.0.1:$UP_PORT"
connect_timeout = "1s"
timeout = "5s"
EOF
    local route
    for route in allow deny; do
        cat >>"$FDIR/gateway.toml" <<EOF

[[routes]]
name = "$route"
path = "/$route/*"
upstream = "demo"
key = ["header:X-User"]
on_error = "$route"

  [[routes.limits]]
  name = "never"
  limit = $LIMIT
  window = "1h"
  algorithm = "sliding_log"
EOF
    done
}

start_upstream() {
    start upstream "$UPSTREAM_BIN" "127.0.0.1:$UP_PORT"
    wait_for 20 "demo-upstream listens" port_open "$UP_PORT"
}

# Topologies: each sets STORE_URL, and the fault's own variables.
topology_single() {
    pick_port R_PORT
    local persist=()
    [[ $FAULT == redis-restart && $AOF == always ]] && persist=(--appendonly yes --appendfsync always)
    redis_start redis "$R_PORT" "${persist[@]}"
    STORE_URL="redis://127.0.0.1:$R_PORT"
    MASTERS=("$R_PORT")
}
topology_sentinel() {
    local i conf
    pick_port M_PORT
    pick_port REPLICA_PORT
    redis_start master "$M_PORT"
    redis_start replica "$REPLICA_PORT" --replicaof 127.0.0.1 "$M_PORT"
    wait_for 30 "the replica syncs" replica_linked "$REPLICA_PORT"
    S_PORTS=()
    for i in 1 2 3; do
        pick_port "S_PORT"
        S_PORTS+=("$S_PORT")
        mkdir -p "$FDIR/sentinel$i"
        conf=$FDIR/sentinel$i/sentinel.conf
        cat >"$conf" <<EOF
port $S_PORT
bind 127.0.0.1
daemonize no
dir $FDIR/sentinel$i
sentinel monitor mymaster 127.0.0.1 $M_PORT 2
sentinel down-after-milliseconds mymaster 1000
sentinel failover-timeout mymaster 5000
sentinel parallel-syncs mymaster 1
EOF
        start "sentinel$i" redis-server "$conf" --sentinel
    done
    sentinels_ready() {
        local p info
        for p in "${S_PORTS[@]}"; do
            info=$(rcli "$p" sentinel master mymaster 2>/dev/null | paste -sd' ' -)
            [[ $info == *"num-slaves 1"* && $info == *"num-other-sentinels 2"* ]] || return 1
        done
    }
    wait_for 60 "the sentinels know the replica and each other" sentinels_ready
    STORE_URL="redis-sentinel://127.0.0.1:${S_PORTS[0]},127.0.0.1:${S_PORTS[1]},127.0.0.1:${S_PORTS[2]}/mymaster"
    MASTERS=("$M_PORT")
}
topology_cluster() { # topology_cluster MASTERS REPLICAS_PER_MASTER
    local n=$(($1 * (1 + $2))) i hosts=() node_port
    C_PORTS=()
    for ((i = 0; i < n; i++)); do
        pick_port node_port cluster
        C_PORTS+=("$node_port")
        hosts+=("127.0.0.1:$node_port")
        # shellcheck disable=SC2046 # the cluster arguments are words
        redis_start "node$i" "$node_port" $(cluster_args)
    done
    run_fg timeout 60 redis-cli --cluster create "${hosts[@]}" --cluster-replicas "$2" --cluster-yes \
        >"$FDIR/cluster-create.log" 2>&1 || die "redis-cli --cluster create failed"
    all_ok() { local p; for p in "${C_PORTS[@]}"; do cluster_ok "$p" || return 1; done; }
    wait_for 60 "cluster_state:ok on every node" all_ok
    STORE_URL="redis-cluster://$(printf '127.0.0.1:%s,' "${C_PORTS[@]:0:3}" | sed 's/,$//')"
    # The master of slot 0 and its id (redis-cli gives the first master slots 0-5460).
    SLOT0_ID=$(rcli "${C_PORTS[0]}" cluster nodes | awk '$3 ~ /master/ && / 0-/ { print $1 }')
    SLOT0_PORT=$(rcli "${C_PORTS[0]}" cluster nodes | awk -v id="$SLOT0_ID" '$1 == id { split($2, a, "[:@]"); print a[2] }')
    [[ -n $SLOT0_ID && -n $SLOT0_PORT ]] || die "no master found for slot 0"
}
current_masters() { # the alive cluster nodes that are masters now
    local p
    for p in "${C_PORTS[@]}"; do answers_pong "$p" && is_master "$p" && echo "$p"; done
    return 0
}

run_fault() { # run_fault FAULT RUN
    FAULT=$1
    FDIR=$TMP/$FAULT-$2
    FAULT_PIDS=()
    PREFIX=sgf-$FAULT
    mkdir -p "$FDIR"
    : >"$FDIR/events"
    log "=== $FAULT (run $2 of $RUNS) ==="
    HOT=hot-1 HOT_SHARE="" NOTE="" TITLE="" UPSTREAM_FLAG=()
    case $FAULT in
    redis-restart)
        topology_single
        TITLE="one Redis killed (SIGKILL), started again ${DOWN} s later (appendfsync $AOF)"
        ;;
    sentinel-failover)
        topology_sentinel
        TITLE="the sentinels' master killed (SIGKILL), its replica promoted"
        ;;
    cluster-reshard)
        topology_cluster 3 0
        HOT=$("$LOAD_BIN" slot-users --route allow --prefix hot- --from 0 --to 0 --count 50)
        HOT_SHARE=$RESHARD_HOT_SHARE
        TITLE="redis-cli --cluster reshard of $RESHARD_SLOTS slots (slot 0 with 50 hot keys first) under load"
        ;;
    cluster-failover)
        topology_cluster 3 1
        HOT=$("$LOAD_BIN" slot-users --route allow --prefix hot- --from 0 --to 0 --count 1)
        TITLE="the master of the hot key's slot killed (SIGKILL), its replica promoted (cluster-node-timeout $NODE_TIMEOUT ms)"
        ;;
    upstream-restart)
        topology_single
        UPSTREAM_FLAG=(--upstream-fault)
        TITLE="the upstream killed (SIGKILL), started again ${DOWN} s later"
        ;;
    esac
    pick_port UP_PORT
    pick_port GW_PORT
    pick_port ADMIN_PORT
    start_upstream
    gw_config
    "$GATEWAY_BIN" check --config "$FDIR/gateway.toml" >"$FDIR/check.out" 2>&1 \
        || { cat "$FDIR/check.out" >&2; die "the generated gateway config is invalid"; }
    start gateway env -u SLIDEGATE_REDIS_URL -u SLIDEGATE_CONFIG -u SLIDEGATE_LOG_FORMAT \
        SLIDEGATE_LOG="info,slidegate::access=off" "$GATEWAY_BIN" --config "$FDIR/gateway.toml"
    gw_ready() { curl -fsS -o /dev/null --max-time 1 "http://127.0.0.1:$ADMIN_PORT/readyz"; }
    wait_for 30 "the gateway is ready" gw_ready

    # Peak, then half of it.
    run_fg timeout $((PEAK_SECONDS + 30)) wrk -t1 -c"$CONNS" -d"${PEAK_SECONDS}s" -s "$ROOT/bench/faults/peak.lua" \
        "http://127.0.0.1:$GW_PORT/" >"$FDIR/wrk-peak.txt" 2>&1 || { cat "$FDIR/wrk-peak.txt" >&2; die "wrk failed"; }
    PEAK=$(awk '/^Requests\/sec:/ { printf "%.0f", $2 }' "$FDIR/wrk-peak.txt")
    [[ -n $PEAK && $PEAK -gt 0 ]] || die "no peak rate from wrk"
    RATE=${FIXED_RATE:-$((PEAK / 2))}
    if [[ -z $HOT_SHARE ]]; then
        # One hot key per route: at most 60 % of the limit over the run.
        HOT_SHARE=$(awk -v l="$LIMIT" -v r="$RATE" -v s="$SECONDS_RUN" 'BEGIN { h = 0.6 * l * 2 / (r * s); if (h > 0.05) h = 0.05; printf "%.4f", h }')
    fi
    log "peak $PEAK req/s (wrk -c$CONNS ${PEAK_SECONDS}s); load $RATE req/s for ${SECONDS_RUN}s, fault at ${FAULT_AT}s"
    sleep 1

    rm -f "$FDIR/run/meta"
    "$LOAD_BIN" run --base "http://127.0.0.1:$GW_PORT" --rate "$RATE" --conns "$CONNS" --seconds "$SECONDS_RUN" \
        --users "$USERS" --hot "$HOT" --hot-share "$HOT_SHARE" --limit "$LIMIT" --key-prefix "$PREFIX" \
        --out "$FDIR/run" >"$FDIR/load.log" 2>&1 &
    LOAD_PID=$!
    PIDS+=("$LOAD_PID")
    FAULT_PIDS+=("$LOAD_PID")
    wait_for 10 "the load starts" test -s "$FDIR/run/meta"
    T0=$(sed -n 's/^start_epoch_ms=//p' "$FDIR/run/meta")
    sleep_until $((T0 + FAULT_AT * 1000))
    inject_"${FAULT//-/_}"
    wait "$LOAD_PID" || die "the load generator failed: $(tail -n 3 "$FDIR/load.log")"
    log "$(tail -n 1 "$FDIR/load.log")"
    sleep 1

    curl -fsS --max-time 5 "http://127.0.0.1:$ADMIN_PORT/metrics" >"$FDIR/metrics.txt" || die "cannot read /metrics"
    local masters=("${MASTERS[@]}")
    [[ $FAULT == cluster-* ]] && mapfile -t masters < <(current_masters)
    zcard_dump "${masters[@]}" >"$FDIR/zcard.txt"
    if [[ $FAULT == cluster-* ]]; then
        local alive=() p
        for p in "${C_PORTS[@]}"; do answers_pong "$p" && alive+=("$p"); done
        NOTE+="MOVED $(errorstat MOVED "${alive[@]}"), ASK $(errorstat ASK "${alive[@]}") replies counted on the nodes (INFO errorstats). "
    fi
    local store_lines
    store_lines=$(grep -ciE 'store|redis|sentinel|cluster' "$FDIR/gateway.log" || true)
    log "gateway log: ${store_lines:-0} lines about the store"
    "$LOAD_BIN" report --dir "$FDIR/run" --fault "$FAULT" --title "$TITLE" --events "$FDIR/events" \
        --zcard "$FDIR/zcard.txt" --metrics "$FDIR/metrics.txt" --peak "$PEAK" --note "${NOTE% }" \
        "${UPSTREAM_FLAG[@]}" --row-out "$ROWS" --chart-out "$CHARTS" >&2 || die "the report failed"
    stop_pids "${FAULT_PIDS[@]}"
}

# ---------------------------------------------------------------- the faults themselves
inject_redis_restart() {
    event fault "Redis killed (SIGKILL)"
    kill -KILL "${PID_OF[redis]}"
    sleep "$DOWN"
    local persist=()
    [[ $AOF == always ]] && persist=(--appendonly yes --appendfsync always)
    event mark "redis-server started again"
    redis_start redis "$R_PORT" "${persist[@]}"
    event back "Redis answers PING"
}
inject_sentinel_failover() {
    event fault "master killed (SIGKILL)"
    kill -KILL "${PID_OF[master]}"
    wait_for 60 "the replica is promoted" is_master "$REPLICA_PORT"
    event back "replica promoted (ROLE master)"
    named() { [[ $(rcli "${S_PORTS[0]}" sentinel get-master-addr-by-name mymaster 2>/dev/null | sed -n 2p) == "$REPLICA_PORT" ]]; }
    wait_for 30 "the sentinels name the new master" named
    event mark "sentinels name it"
    MASTERS=("$REPLICA_PORT")
}
inject_cluster_reshard() {
    local to_id
    to_id=$(rcli "${C_PORTS[0]}" cluster nodes | awk -v id="$SLOT0_ID" '$3 ~ /master/ && $1 != id { print $1; exit }')
    event fault "reshard of $RESHARD_SLOTS slots starts"
    run_fg timeout 300 redis-cli --cluster reshard "127.0.0.1:${C_PORTS[0]}" --cluster-from "$SLOT0_ID" \
        --cluster-to "$to_id" --cluster-slots "$RESHARD_SLOTS" --cluster-yes --cluster-pipeline 1 \
        >"$FDIR/reshard.log" 2>&1 || die "redis-cli --cluster reshard failed: $(tail -n 3 "$FDIR/reshard.log")"
    event back "reshard done"
    NOTE+="reshard: $(grep -c '^Moving slot' "$FDIR/reshard.log") slots moved. "
}
inject_cluster_failover() {
    local replica
    replica=$(rcli "${C_PORTS[0]}" cluster nodes | awk -v id="$SLOT0_ID" '$4 == id { split($2, a, "[:@]"); print a[2]; exit }')
    [[ -n $replica ]] || die "no replica of the slot-0 master"
    event fault "master of slot 0 killed (SIGKILL)"
    kill -KILL "${PID_OF[node$(node_index "$SLOT0_PORT")]}"
    wait_for 60 "the replica is promoted" is_master "$replica"
    event back "its replica promoted (ROLE master)"
}
node_index() { local i; for i in "${!C_PORTS[@]}"; do [[ ${C_PORTS[i]} == "$1" ]] && echo "$i"; done; }
inject_upstream_restart() {
    event fault "upstream killed (SIGKILL)"
    kill -KILL "${PID_OF[upstream]}"
    sleep "$DOWN"
    start_upstream
    event back "upstream accepts again"
}

for f in "${requested[@]}"; do
    for ((run = 1; run <= RUNS; run++)); do run_fault "$f" "$run"; done
done

# ---------------------------------------------------------------- results
echo
echo "Faults under load — $(nproc) CPU(s) shared by the load generator, the gateway, Redis and the upstream;" \
    "store.timeout $STORE_TIMEOUT; load: half of each topology's wrk peak (-c$CONNS, ${PEAK_SECONDS}s) for ${SECONDS_RUN}s," \
    "fault at ${FAULT_AT}s; replica_acks $REPLICA_ACKS on the failovers; cluster-require-full-coverage $COVERAGE;" \
    "slidegate $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
echo
cat "$CHARTS"
echo
echo "| fault | load req/s | requests | store back after | decided while down (lowest per s; goal >= 55 % in cluster-failover) | first decided after | all decided after (goal <= 2 s) | fail-open 200 | 503 on deny | 502/504 | unexplained (goal 0) | dropped (goal 0) | slowest ms | allowed missing in Redis | notes |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
cat "$ROWS"
echo
echo "total time: $(($(date +%s) - START_TIME)) s (build included)"

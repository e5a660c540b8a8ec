#!/usr/bin/env bash
# bench/run.sh — slidegate next to the anchors a team would otherwise use, in one invocation.
#
# Targets (bench/README.md describes each one, the method and the goals):
#   nginx         plain NGINX reverse proxy, 1 worker (the proxy-cost anchor)
#   peer          NGINX + Lua + Redis built by hand: 2 workers, one EVALSHA of the sliding-log
#                 script per request (bench/peer/), one hot key
#   peer-keys     the same, keyed by a random X-User header among 100,000 (bench/random_user.lua)
#   haproxy-deny  HAProxy stick-table deny, 429 to every request (the deny anchor)
#   proxy         slidegate, a route without limits
#   memory        slidegate, embedded memory store, one hot key, a limit never reached (10,000
#                 per 10 ms: why, at HOT_NEVER below)
#   redis-hot     slidegate, Redis, key = ["route"] (one hot key), the same limit
#   redis-keys    slidegate, Redis, key = ["header:X-User"] (100,000 keys), same wrk script,
#                 10,000 per hour per key
#   redis-keys-acks  redis-keys with store.replica_acks = 1: every allowed decision answered
#                 once a replica holds it. Not in the default set: when selected, the private
#                 Redis gets a replica for the whole run (every target then runs against a
#                 replicated Redis), so `bench/run.sh redis-keys redis-keys-acks` gives the cost
#                 of the acknowledgement alone as the ratio of the two
#   deny          slidegate, Redis, 1 per hour on one key: every request after the first is a
#                 429 from the local deny cache
#   otp-body      slidegate, Redis, an OTP route keyed on the JSON body member `json:phone`:
#                 200-byte POST bodies, 100,000 distinct numbers (bench/otp_body.lua)
#   login-outcome slidegate, Redis, `count_status = [401]`: half the attempts fail (the demo
#                 upstream's /login?fail=1), every attempt reserved, the others refunded
#                 (bench/login.lua, 100,000 X-User keys)
#   login-leave   login-outcome with a quarter of the clients leaving before their answer:
#                 wrk (bench/login.lua) on three quarters of the connections, and BENCH_LEAVERS
#                 clients (bench/leaver.py) that send a failing attempt the demo upstream holds
#                 BENCH_LEAVE_MS, close the socket at a random moment before it, and reconnect;
#                 checks that the entries in Redis plus the refunds equal the admitted attempts
#   gcra          redis-keys with a gcra limit (10,000 per hour) instead of the sliding log
#   batch         slidegate's POST /v1/decisions, 10,000 distinct keys per call, two limits,
#                 next to redis-benchmark -P 16 running EVALSHA of the same two-limit script
#   rls           slidegate as Envoy's rate-limit service: gRPC ShouldRateLimit calls with one
#                 descriptor each (user=<one of 100,000>), 10,000 per hour per key, from
#                 bench/rls/load.rs (BENCH_RLS_CONNS HTTP/2 connections, BENCH_RLS_IN_FLIGHT
#                 calls in flight on each); decisions/s next to redis-keys, and p99 at half load
#   ext-authz     slidegate as Envoy's external authorizer: gRPC Check calls for POST /otp/send
#                 with a 200-byte JSON body (raw_body) keyed by `json:phone` (one of 100,000
#                 numbers), as Envoy sends them with with_request_body, from the same load
#                 generator (--service check); decisions/s next to otp-body (no upstream and no
#                 proxying to pay for)
#
# A/B: with BENCH_BASELINE_BIN=/path/to/an/older/slidegate, the proxy, memory, redis-hot and
# redis-keys targets also run on that binary (targets proxy-base, memory-base, ...: the same
# config, its own process and key prefix), in the same rounds, each next to its twin, and the
# new/old ratio of each is printed (goal 0.97x). Their configs use only settings both know.
#
# The memory store's bound (store.max_keys under a flood of distinct keys) is measured apart:
# bench/memory/run.sh.
#
# One invocation, on loopback only: installs what is missing with apt-get (wrk nginx
# libnginx-mod-http-lua haproxy hey), builds the release binaries, starts a private
# redis-server, the demo upstream, every selected proxy (all on free ports), then
#   1. loads every wrk target with identical settings, BENCH_ROUNDS rounds, order reversed
#      every other round, each measured run preceded by a short warm-up;
#   2. runs the batch API and redis-benchmark in alternating rounds, then the rls target's rounds;
#   3. runs hey at half of the measured peak for nginx, redis-hot and peer, and paced wrk
#      (bench/wrk_pace.lua) at half the peak of redis-keys and otp-body (p99 at half load);
#   4. prints per-round figures, medians, CPU microseconds per request of every process
#      involved (from /proc/PID/stat before and after each measured run), Redis EVALSHA calls;
#   5. verifies in slidegate's /metrics and in Redis itself (ZCARD of the sorted sets where a
#      limit keeps every entry, EVALSHA calls elsewhere) that every allowed request was decided
#      in Redis — exit 1 if not;
#   6. prints the goals as PASS/MISS lines and a Markdown table for bench/README.md.
# Every process it starts is stopped on exit, including on failure or Ctrl-C.
#
# Usage: bench/run.sh [--quick] [TARGET...]     (from any directory; root only to install)
#   TARGET... (or BENCH_TARGETS="nginx peer redis-hot") selects targets; default: all.
#   --quick: 3 s runs, 1 s warm-up, 1 round (environment knobs still win).
# Knobs (environment): see bench/README.md, or the defaults below.

set -euo pipefail
export LC_ALL=C # wrk/hey output and printf use "." decimals
START_TIME=$(date +%s)

ALL_TARGETS=(nginx peer peer-keys haproxy-deny proxy memory redis-hot redis-keys redis-keys-acks deny otp-body
    login-outcome login-leave gcra batch rls ext-authz)
# Every target but redis-keys-acks, which puts a replica behind the shared Redis.
DEFAULT_TARGETS=(nginx peer peer-keys haproxy-deny proxy memory redis-hot redis-keys deny otp-body login-outcome
    login-leave gcra batch rls ext-authz)
AB_TARGETS=(proxy memory redis-hot redis-keys) # run on BENCH_BASELINE_BIN too, as <target>-base
QUICK=0
ARG_TARGETS=()
for arg in "$@"; do
    case $arg in
    --quick) QUICK=1 ;;
    -h | --help)
        sed -n '2,/^$/{s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
        exit 0
        ;;
    -*)
        printf '[bench] ERROR: unknown option %s (see --help)\n' "$arg" >&2
        exit 2
        ;;
    *) ARG_TARGETS+=("$arg") ;;
    esac
done

if ((QUICK)); then q_seconds=3 q_warmup=1 q_rounds=1; else q_seconds=10 q_warmup=2 q_rounds=2; fi
SECONDS_PER_RUN=${BENCH_SECONDS:-$q_seconds}
WARMUP=${BENCH_WARMUP:-$q_warmup}
ROUNDS=${BENCH_ROUNDS:-$q_rounds}
THREADS=${BENCH_THREADS:-1}
CONNS=${BENCH_CONNS:-32}
URL_PATH=${BENCH_PATH:-/bench}
USERS=${BENCH_USERS:-100000}
HALF=${BENCH_HALF:-1}
HALF_TARGETS=${BENCH_HALF_TARGETS:-nginx redis-hot peer}
HALF_KEYED_TARGETS=${BENCH_HALF_KEYED_TARGETS:-redis-keys otp-body}
HALF_SECONDS=${BENCH_HALF_SECONDS:-$SECONDS_PER_RUN}
HALF_RATE=${BENCH_HALF_RATE:-own}
HEY_CONNS=${BENCH_HEY_CONNS:-$CONNS}
BATCH_KEYS=${BENCH_BATCH_KEYS:-10000}
BATCH_BODIES=${BENCH_BATCH_BODIES:-10}
BATCH_CONNS=${BENCH_BATCH_CONNS:-2}
RB_CLIENTS=${BENCH_RB_CLIENTS:-50}
RB_PIPELINE=${BENCH_RB_PIPELINE:-16}
RLS_CONNS=${BENCH_RLS_CONNS:-4}
RLS_IN_FLIGHT=${BENCH_RLS_IN_FLIGHT:-16}
declare -A GRPC_PORT=() # the gRPC listener of the rls and ext-authz targets
GW_WORKERS=${BENCH_GW_WORKERS:-}
NGINX_WORKERS=${BENCH_NGINX_WORKERS:-1}
PEER_WORKERS=${BENCH_PEER_WORKERS:-2}
HAPROXY_THREADS=${BENCH_HAPROXY_THREADS:-}
STORE_TIMEOUT=${BENCH_STORE_TIMEOUT:-50ms}
PHONES=${BENCH_OTP_PHONES:-100000}
OTP_NORMALIZE=${BENCH_OTP_NORMALIZE:-0}
FAIL_SHARE=${BENCH_LOGIN_FAIL_SHARE:-0.5}
LEAVERS=${BENCH_LEAVERS:-$((CONNS / 4))} # login-leave: clients that leave, of CONNS
LEAVE_MS=${BENCH_LEAVE_MS:-20}          # login-leave: how long the upstream holds their answer
BASELINE_BIN=${BENCH_BASELINE_BIN:-}
export BENCH_USERS=$USERS BENCH_PHONES=$PHONES BENCH_FAIL_SHARE=$FAIL_SHARE BENCH_THREADS=$THREADS # read by the wrk scripts
unset BENCH_RATE # set only for the paced half-load runs (bench/wrk_pace.lua)

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

log() { printf '[bench] %s\n' "$*" >&2; }
die() { printf '[bench] ERROR: %s\n' "$*" >&2; exit 1; }

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
for knob in SECONDS_PER_RUN:SECONDS WARMUP ROUNDS THREADS CONNS USERS HALF HALF_SECONDS HEY_CONNS \
    BATCH_KEYS BATCH_BODIES BATCH_CONNS RB_CLIENTS RB_PIPELINE NGINX_WORKERS PEER_WORKERS PHONES:OTP_PHONES \
    OTP_NORMALIZE RLS_CONNS RLS_IN_FLIGHT; do
    var=${knob%%:*} env_name=BENCH_${knob#*:} # VAR or VAR:ENV-SUFFIX
    is_uint "${!var}" || die "$env_name must be a whole number, got '${!var}'"
done
((SECONDS_PER_RUN >= 1 && ROUNDS >= 1 && THREADS >= 1 && CONNS >= THREADS)) \
    || die "need BENCH_SECONDS >= 1, BENCH_ROUNDS >= 1, BENCH_CONNS >= BENCH_THREADS >= 1"
((BATCH_KEYS >= 1 && BATCH_KEYS <= 10000)) || die "BENCH_BATCH_KEYS must be 1..10000 (the API's maximum)"
((BATCH_BODIES >= 1 && BATCH_CONNS >= 1 && HEY_CONNS >= 1 && USERS >= 1)) || die "batch/hey/users knobs must be >= 1"
[[ $HALF_RATE == own || $HALF_RATE == common ]] || die "BENCH_HALF_RATE must be 'own' or 'common'"
[[ -z $GW_WORKERS ]] || is_uint "$GW_WORKERS" || die "BENCH_GW_WORKERS must be a whole number"
[[ -z $HAPROXY_THREADS ]] || is_uint "$HAPROXY_THREADS" || die "BENCH_HAPROXY_THREADS must be a whole number"
((PHONES >= 1 && PHONES <= 99999999)) || die "BENCH_OTP_PHONES must be 1..99999999"
[[ $FAIL_SHARE =~ ^(0(\.[0-9]+)?|1(\.0+)?)$ ]] || die "BENCH_LOGIN_FAIL_SHARE must be a share between 0 and 1, got '$FAIL_SHARE'"
if [[ -n $BASELINE_BIN ]]; then
    [[ -x $BASELINE_BIN && -f $BASELINE_BIN ]] || die "BENCH_BASELINE_BIN: not an executable file: $BASELINE_BIN"
    BASELINE_BIN=$(cd "$(dirname "$BASELINE_BIN")" && pwd)/$(basename "$BASELINE_BIN")
fi
# The limits below are never reached only while no key gets near 10,000 decisions in its window.
# One Redis decides at most ~200,000 requests/s (its CPU per decision is >= 5 us), so over the
# T seconds a keyed target is loaded (warm-ups, measured runs, half load) a key of N gets about
# 200000 * T / N at worst on average: keep that at a fifth of the limit (random draws are uneven).
LOADED_S=$((ROUNDS * (WARMUP + SECONDS_PER_RUN) + HALF_SECONDS))
for knob in USERS:USERS PHONES:OTP_PHONES; do
    var=${knob%%:*}
    ((200000 * LOADED_S / ${!var} <= 2000)) \
        || die "BENCH_${knob#*:}=${!var} keys are too few for ${LOADED_S} s of load: a key could reach its limit (need >= $((100 * LOADED_S)))"
done
((200000 * ROUNDS * (WARMUP + SECONDS_PER_RUN) / (BATCH_KEYS * BATCH_BODIES) <= 2000)) \
    || die "BENCH_BATCH_KEYS x BENCH_BATCH_BODIES keys are too few for the batch's load: a key could reach its limit"

# ---------------------------------------------------------------- targets
requested=()
if ((${#ARG_TARGETS[@]})); then
    requested=("${ARG_TARGETS[@]}")
elif [[ -n ${BENCH_TARGETS:-} ]]; then
    read -r -a requested <<<"$BENCH_TARGETS"
else
    requested=("${DEFAULT_TARGETS[@]}")
fi
declare -A WANT=()
for t in "${requested[@]}"; do
    [[ $t == redis-benchmark ]] && t="batch" # the pair runs together
    [[ " ${ALL_TARGETS[*]} " == *" $t "* ]] || die "unknown target '$t' (known: ${ALL_TARGETS[*]})"
    WANT[$t]=1
done
TARGETS=()   # selected, in canonical order (each A/B target followed by its -base twin)
WRK_TARGETS=()
BASE_TARGETS=()
for t in "${ALL_TARGETS[@]}"; do
    [[ -n ${WANT[$t]:-} ]] || continue
    TARGETS+=("$t")
    [[ $t == batch || $t == rls || $t == ext-authz ]] || WRK_TARGETS+=("$t")
    if [[ -n $BASELINE_BIN && " ${AB_TARGETS[*]} " == *" $t "* ]]; then
        WANT[$t-base]=1
        TARGETS+=("$t-base")
        WRK_TARGETS+=("$t-base")
        BASE_TARGETS+=("$t-base")
    fi
done
wants() { [[ -n ${WANT[$1]:-} ]]; }
wants_any() {
    local t
    for t in "$@"; do wants "$t" && return 0; done
    return 1
}
HEY_TARGETS=()
PACED_TARGETS=() # keyed targets at half load: paced wrk (every request differs, hey cannot)
if ((HALF)); then
    for t in $HALF_TARGETS; do
        case $t in nginx | redis-hot | peer) ;; *) die "BENCH_HALF_TARGETS: only nginx, redis-hot, peer" ;; esac
        wants "$t" && HEY_TARGETS+=("$t")
    done
    for t in $HALF_KEYED_TARGETS; do
        case $t in peer-keys | redis-keys | otp-body | login-outcome | gcra) ;;
        *) die "BENCH_HALF_KEYED_TARGETS: only peer-keys, redis-keys, otp-body, login-outcome, gcra" ;;
        esac
        wants "$t" && PACED_TARGETS+=("$t")
    done
fi

# Per target: the process under test (a CPU group, see below), what its ratio is taken against,
# whether it answers 429s by design, and whether its decisions happen in Redis.
GW_TARGETS=(proxy memory redis-hot redis-keys redis-keys-acks deny otp-body login-outcome login-leave gcra
    batch rls ext-authz) # slidegate
declare -A FRONT=([nginx]=nginx [peer]=peer [peer-keys]=peer [haproxy-deny]=haproxy [redis-benchmark]=none)
declare -A ANCHOR=([proxy]=nginx [memory]=nginx [redis-hot]=peer [redis-keys]=peer-keys
    [redis-keys-acks]=redis-keys [deny]=haproxy-deny [otp-body]=redis-keys [login-outcome]=redis-keys
    [login-leave]=redis-keys [gcra]=redis-keys [batch]=redis-benchmark [rls]=redis-keys
    [ext-authz]=otp-body)
declare -A DENIES=([haproxy-deny]=1 [deny]=1)
declare -A USES_REDIS=([peer]=1 [peer-keys]=1 [redis-hot]=1 [redis-keys]=1 [redis-keys-acks]=1 [deny]=1
    [otp-body]=1 [login-outcome]=1 [login-leave]=1 [gcra]=1 [batch]=1 [redis-benchmark]=1 [rls]=1
    [ext-authz]=1)
# The wrk script of each keyed target (the others are plain GETs of BENCH_PATH).
declare -A KEYED=([peer-keys]=random_user.lua [redis-keys]=random_user.lua [redis-keys-acks]=random_user.lua
    [otp-body]=otp_body.lua [login-outcome]=login.lua [login-leave]=login.lua [gcra]=random_user.lua)
# Redis holds one sorted-set entry per allowed decision of these targets (their windows hold
# every entry of a run); the others are checked against the EVALSHA calls (verification).
declare -A ZSET_EXACT=([redis-keys]=1 [redis-keys-acks]=1 [deny]=1 [otp-body]=1)
declare -A FRONT_LABEL=([nginx]="nginx, $NGINX_WORKERS worker" [peer]="nginx+lua, $PEER_WORKERS workers"
    [haproxy]=haproxy [none]="-")
declare -A GW_BIN=() # the binary each slidegate target runs
for t in "${GW_TARGETS[@]}"; do FRONT[$t]=gw-$t FRONT_LABEL[gw-$t]=slidegate; done
for b in "${BASE_TARGETS[@]}"; do
    t=${b%-base}
    FRONT[$b]=gw-$b FRONT_LABEL[gw-$b]="slidegate (baseline)" ANCHOR[$b]=${ANCHOR[$t]}
    [[ -n ${USES_REDIS[$t]:-} ]] && USES_REDIS[$b]=1
    [[ -n ${KEYED[$t]:-} ]] && KEYED[$b]=${KEYED[$t]}
    [[ -n ${ZSET_EXACT[$t]:-} ]] && ZSET_EXACT[$b]=1
    GW_BIN[$b]=$BASELINE_BIN
done

# ---------------------------------------------------------------- cleanup
TMP=""
PIDS=()  # background services
CHILD="" # the current long-running step (cargo, wrk, hey, clients), see run_fg
LEAVER_PID="" # login-leave's leaving clients while they run beside wrk, see leave_start
exec 9>&2 # the real stderr, for cleanup messages even if a signal lands inside a redirection
cleanup() {
    local rc=$? pid i
    trap - EXIT INT TERM
    exec 2>&9
    # Stop front to back: the running load generator/cargo, then the services in reverse order.
    local order=() interrupted=0
    ((rc == 130 || rc == 143)) && interrupted=1 && log "interrupted, stopping everything"
    [[ -n $CHILD ]] && order+=("$CHILD")
    [[ -n $LEAVER_PID ]] && order+=("$LEAVER_PID")
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do order+=("${PIDS[i]}"); done
    for pid in "${order[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${order[@]}"; do
        for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if [[ -n $TMP && -d $TMP ]]; then
        if ((rc != 0 && !interrupted)); then
            # Show the tail of every service log to explain the failure.
            for f in "$TMP"/*.log; do
                [[ -s $f ]] || continue
                printf '[bench] --- %s (tail) ---\n' "$(basename "$f")" >&2
                tail -n 20 "$f" >&2 || true
            done
        fi
        rm -rf "$TMP"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# run_fg CMD...: runs CMD and waits for it in a way that lets INT/TERM interrupt at once
# (bash defers traps until a foreground child exits; `wait` returns immediately).
run_fg() {
    local rc=0
    "$@" &
    CHILD=$!
    wait "$CHILD" || rc=$?
    CHILD=""
    return "$rc"
}

# ---------------------------------------------------------------- 1. tools
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
nginx_modules_dir() {
    local d
    d=$("$NGINX" -V 2>&1 | tr ' ' '\n' | sed -n 's/^--modules-path=//p' | head -n 1) || true
    echo "${d:-/usr/lib/nginx/modules}"
}
need_install=()
((${#WRK_TARGETS[@]})) && ! command -v wrk >/dev/null 2>&1 && need_install+=(wrk)
if wants_any nginx peer peer-keys && ! [[ -x $NGINX ]]; then need_install+=(nginx); fi
if wants_any peer peer-keys && ! [[ -x $NGINX && -f $(nginx_modules_dir)/ngx_http_lua_module.so ]]; then
    need_install+=(libnginx-mod-http-lua)
fi
wants haproxy-deny && ! command -v haproxy >/dev/null 2>&1 && need_install+=(haproxy)
((${#HEY_TARGETS[@]})) && ! command -v hey >/dev/null 2>&1 && need_install+=(hey)
if ((${#need_install[@]})); then
    log "installing ${need_install[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    timeout 600 apt-get update -q >/dev/null || die "apt-get update failed"
    timeout 900 apt-get install -y -q --no-install-recommends "${need_install[@]}" >/dev/null \
        || die "apt-get install ${need_install[*]} failed"
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
required=(redis-server redis-cli curl timeout pgrep)
((${#WRK_TARGETS[@]})) && required+=(wrk)
wants_any nginx peer peer-keys && required+=("$NGINX")
wants haproxy-deny && required+=(haproxy)
wants batch && required+=(python3 redis-benchmark)
wants login-leave && required+=(python3)
((${#HEY_TARGETS[@]})) && required+=(hey)
for tool in "${required[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || die "missing required tool: $tool"
done
NGINX_MODULES=$(nginx_modules_dir)
if wants_any peer peer-keys; then
    for m in ndk_http_module ngx_http_lua_module; do
        [[ -f $NGINX_MODULES/$m.so ]] || die "missing NGINX module $NGINX_MODULES/$m.so (libnginx-mod-http-lua)"
    done
fi
CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)

# ---------------------------------------------------------------- 2. build
log "building release binaries (cargo build --release --bins)"
run_fg timeout 1800 cargo build --release --bins --quiet || die "cargo build failed"
if wants_any rls ext-authz; then
    log "building the rate-limit service's load generator (cargo build --release --example rls_load)"
    run_fg timeout 1800 cargo build --release --example rls_load --quiet || die "building bench/rls/load.rs failed"
fi
GATEWAY_BIN=$ROOT/target/release/slidegate
UPSTREAM_BIN=$ROOT/target/release/demo-upstream
[[ -x $GATEWAY_BIN && -x $UPSTREAM_BIN ]] || die "release binaries not found under target/release"

TMP=$(mktemp -d -t slidegate-bench.XXXXXX)
chmod 755 "$TMP" # nginx workers drop root privileges and must reach their temp paths

# ---------------------------------------------------------------- 3. ports
# A port is free when nothing accepts a connection on it (pure bash, no python needed).
# Candidates lie outside the kernel's ephemeral range (below it, else above it): outgoing
# connections (wrk, curl, the Redis clients) may hold any ephemeral port, failing a later bind.
read -r EPH_LO EPH_HI 2>/dev/null </proc/sys/net/ipv4/ip_local_port_range || { EPH_LO=32768 EPH_HI=60999; }
if ((EPH_LO >= 11024)); then PORT_LO=10000 PORT_HI=$((EPH_LO - 1)); else PORT_LO=$((EPH_HI + 1)) PORT_HI=65535; fi
((PORT_HI - PORT_LO >= 100)) || { PORT_LO=1024 PORT_HI=65535; }
TAKEN=" "
free_port() {
    local p tries span=$((PORT_HI - PORT_LO + 1))
    p=$((PORT_LO + RANDOM % span))
    for ((tries = 0; tries < 500; tries++, p++)); do
        ((p > PORT_HI)) && p=$PORT_LO
        [[ $TAKEN == *" $p "* ]] && continue
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    die "no free loopback port found"
}
# pick_port VAR: a free port into VAR, recorded in TAKEN (free_port runs in a subshell).
pick_port() {
    local p
    p=$(free_port) || exit 1
    TAKEN+="$p "
    printf -v "$1" '%s' "$p"
}
pick_port REDIS_PORT
pick_port UP_PORT
declare -A PORT=() ADMIN=()

# ---------------------------------------------------------------- 4. services
declare -A GROUP=() # CPU group name -> PIDs whose /proc/PID/stat times are summed
start() { # start NAME CMD...: runs CMD in the background, logging to $TMP/NAME.log
    local name=$1
    shift
    "$@" >"$TMP/$name.log" 2>&1 &
    PIDS+=($!)
}

# wait_http NAME URL: bounded retry until URL answers 2xx (and the process is still alive).
wait_http() {
    local name=$1 url=$2 pid=${PIDS[-1]} i
    for ((i = 0; i < 150; i++)); do
        kill -0 "$pid" 2>/dev/null || die "$name exited during startup"
        curl -fsS -o /dev/null --max-time 1 "$url" 2>/dev/null && return 0
        sleep 0.2
    done
    die "$name did not answer at $url within 30s"
}
# wait_port NAME PORT: bounded retry until something accepts on 127.0.0.1:PORT.
wait_port() {
    local name=$1 port=$2 pid=${PIDS[-1]} i
    for ((i = 0; i < 150; i++)); do
        kill -0 "$pid" 2>/dev/null || die "$name exited during startup"
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        sleep 0.2
    done
    die "$name did not listen on 127.0.0.1:$port within 30s"
}

rcli() { timeout 10 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }

log "starting redis-server on 127.0.0.1:$REDIS_PORT"
start redis redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --daemonize no --dir "$TMP"
GROUP[redis]=${PIDS[-1]}
for ((i = 0; ; i++)); do
    ((i < 150)) || die "redis-server did not answer within 30s"
    kill -0 "${PIDS[-1]}" 2>/dev/null || die "redis-server exited during startup"
    [[ $(rcli ping 2>/dev/null) == PONG ]] && break
    sleep 0.2
done
if wants redis-keys-acks; then
    # A replica for redis-keys-acks to wait for (its CPU is not in the Redis column).
    pick_port REPLICA_PORT
    mkdir -p "$TMP/replica"
    log "starting a replica of it on 127.0.0.1:$REPLICA_PORT (redis-keys-acks)"
    start replica redis-server --port "$REPLICA_PORT" --bind 127.0.0.1 --save "" --appendonly no \
        --daemonize no --dir "$TMP/replica" --replicaof 127.0.0.1 "$REDIS_PORT"
    for ((i = 0; ; i++)); do
        ((i < 150)) || die "the replica did not sync within 30s"
        timeout 5 redis-cli -h 127.0.0.1 -p "$REPLICA_PORT" info replication 2>/dev/null \
            | grep -q '^master_link_status:up' && break
        sleep 0.2
    done
fi

log "starting demo-upstream on 127.0.0.1:$UP_PORT"
start upstream "$UPSTREAM_BIN" "127.0.0.1:$UP_PORT"
GROUP[upstream]=${PIDS[-1]}
wait_http demo-upstream "http://127.0.0.1:$UP_PORT/"

# nginx_group GROUPNAME: the master (last started) plus its workers.
nginx_group() {
    local master=${PIDS[-1]} workers
    workers=$(pgrep -P "$master" | tr '\n' ' ') || true
    [[ -n $workers ]] || die "$1: no NGINX worker processes found under master $master"
    GROUP[$1]="$master $workers"
}

# nginx_conf DIR WORKERS EXTRA_MAIN EXTRA_HTTP SERVERS: a minimal config, keepalive pool to the
# demo upstream. Each server block comes from the caller.
nginx_conf() {
    local dir=$1 workers=$2 main=$3 http=$4 servers=$5
    mkdir -p "$dir"
    cat >"$dir/nginx.conf" <<EOF
# Generated by bench/run.sh.
$main
daemon off;
master_process on;
worker_processes $workers;
pid $dir/nginx.pid;
error_log $dir/error.log warn;

events {
    worker_connections 4096;
}

http {
    access_log off;
    client_body_temp_path $dir/client_body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
$http
    upstream demo {
        server 127.0.0.1:$UP_PORT;
        keepalive 64;
    }
$servers
}
EOF
    "$NGINX" -t -q -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf" 2>"$dir/t.out" \
        || { cat "$dir/t.out" >&2; die "generated nginx config $(basename "$dir") is invalid"; }
}
# The proxying part every NGINX location shares: what slidegate sends the upstream too.
# shellcheck disable=SC2016 # NGINX variables, not shell ones
NGINX_PROXY='
            proxy_pass http://demo;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;'

if wants nginx; then
    pick_port "PORT[nginx]"
    nginx_conf "$TMP/nginx" "$NGINX_WORKERS" "" "" "
    server {
        listen 127.0.0.1:${PORT[nginx]};
        location / {$NGINX_PROXY
        }
    }"
    log "starting nginx ($NGINX_WORKERS worker) on 127.0.0.1:${PORT[nginx]}"
    start nginx "$NGINX" -p "$TMP/nginx" -e "$TMP/nginx/error.log" -c "$TMP/nginx/nginx.conf"
    wait_http nginx "http://127.0.0.1:${PORT[nginx]}$URL_PATH"
    nginx_group nginx
fi

# The peer: the limit is never reached (10^8 per hour), so every request costs one EVALSHA and
# every allowed request stays in its sorted set for the ZCARD check.
PEER_LIMIT=100000000
PEER_WINDOW_MS=3600000
if wants_any peer peer-keys; then
    pick_port "PORT[peer]"
    pick_port "PORT[peer-keys]"
    nginx_conf "$TMP/peer" "$PEER_WORKERS" "load_module $NGINX_MODULES/ndk_http_module.so;
load_module $NGINX_MODULES/ngx_http_lua_module.so;" "
    lua_package_path \"$ROOT/bench/peer/?.lua;;\";
    init_by_lua_block {
        require(\"limiter\").init{ script = \"$ROOT/bench/peer/sliding_log.lua\",
            host = \"127.0.0.1\", port = $REDIS_PORT, pool_size = 64,
            limit = $PEER_LIMIT, window_ms = $PEER_WINDOW_MS }
    }" "
    server {
        listen 127.0.0.1:${PORT[peer]};
        location / {
            access_by_lua_block { require(\"limiter\").check(\"peer-hot:{hot}\") }$NGINX_PROXY
        }
    }
    server {
        listen 127.0.0.1:${PORT[peer-keys]};
        location / {
            access_by_lua_block {
                local user = ngx.var.http_x_user
                if not user or user == \"\" then return ngx.exit(400) end
                if #user > 64 or user:find(\"[{}#%s]\") then user = \"#\" .. ngx.md5(user) end
                require(\"limiter\").check(\"peer-keys:{\" .. user .. \"}\")
            }$NGINX_PROXY
        }
    }"
    log "starting the NGINX + Lua peer ($PEER_WORKERS workers) on 127.0.0.1:${PORT[peer]} (hot key)" \
        "and 127.0.0.1:${PORT[peer-keys]} (X-User keys)"
    start peer "$NGINX" -p "$TMP/peer" -e "$TMP/peer/error.log" -c "$TMP/peer/nginx.conf"
    # Not through the limiter: the readiness probe must not add to the sorted sets.
    wait_port peer "${PORT[peer]}"
    nginx_group peer
fi

if wants haproxy-deny; then
    pick_port "PORT[haproxy-deny]"
    nbthread=""
    [[ -n $HAPROXY_THREADS ]] && nbthread="nbthread $HAPROXY_THREADS"
    cat >"$TMP/haproxy.cfg" <<EOF
# Generated by bench/run.sh: a stick-table deny, 1 request per hour per client IP, so every
# request after the first is answered 429 by HAProxy itself (the deny anchor).
global
    maxconn 4096
    $nbthread

defaults
    mode http
    timeout connect 1s
    timeout client 30s
    timeout server 30s

frontend deny
    bind 127.0.0.1:${PORT[haproxy-deny]}
    stick-table type ip size 1k expire 1h store http_req_rate(1h)
    http-request track-sc0 src
    http-request deny deny_status 429 if { sc_http_req_rate(0) gt 1 }
    default_backend demo

backend demo
    http-reuse always
    server up 127.0.0.1:$UP_PORT
EOF
    haproxy -c -q -f "$TMP/haproxy.cfg" >"$TMP/haproxy-c.out" 2>&1 \
        || { cat "$TMP/haproxy-c.out" >&2; die "generated haproxy config is invalid"; }
    log "starting haproxy on 127.0.0.1:${PORT[haproxy-deny]}"
    start haproxy haproxy -db -f "$TMP/haproxy.cfg"
    GROUP[haproxy]=${PIDS[-1]}
    wait_port haproxy "${PORT[haproxy-deny]}"
fi

# slidegate: one process per target, each with its own generated config and key prefix. A -base
# twin (A/B) gets the same route under its own prefix, and runs BENCH_BASELINE_BIN; configs of
# the A/B targets use only settings an older build knows (it refuses unknown keys).
ADMIN_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
NEVER=100000000 # the peer's and redis-benchmark's hand-made script: a limit never reached
gw_config() { # gw_config TARGET STORE ROUTE_TOML (STORE: memory, redis or redis-acks)
    local t=$1 store=$2 route=$3 store_toml
    if [[ $store == redis* ]]; then
        store_toml="backend = \"redis\"
url = \"redis://127.0.0.1:$REDIS_PORT\"
timeout = \"$STORE_TIMEOUT\"
key_prefix = \"sgb-$t\""
        [[ $store == redis-acks ]] && store_toml+=$'\nreplica_acks = 1'
    else
        store_toml='backend = "memory"'
    fi
    cat >"$TMP/gw-$t.toml" <<EOF
# Generated by bench/run.sh for the $t target.
[server]
listen = "127.0.0.1:${PORT[$t]}"

[admin]
listen = "127.0.0.1:${ADMIN[$t]}"
token_env = "SLIDEGATE_ADMIN_TOKEN"

[store]
$store_toml

[upstreams.demo]
url = "http://127.0.0.1:$UP_PORT"

$route
EOF
}
# limit_toml NAME LIMIT WINDOW ALGORITHM [EXTRA_LINE]: one [[routes.limits]] table.
limit_toml() {
    printf '\n  [[routes.limits]]\n  name = "%s"\n  limit = %s\n  window = "%s"\n  algorithm = "%s"\n' \
        "$1" "$2" "$3" "$4"
    [[ -z ${5:-} ]] || printf '  %s\n' "$5"
}
# route_toml NAME PATH KEY_TOML [EXTRA_LINE]: a route to the demo upstream (KEY_TOML may be empty).
route_toml() {
    printf '[[routes]]\nname = "%s"\npath = "%s"\nupstream = "demo"\n' "$1" "$2"
    [[ -z $3 ]] || printf 'key = %s\n' "$3"
    [[ -z ${4:-} ]] || printf '%s\n' "$4"
}
# Limits never reached, within the bounds the config enforces (a sliding_log limit holds at most
# 10,000; the counter's and gcra's limit * window in microseconds stay below 2^53; windows are
# 1 ms .. 366 d):
# - one hot key (memory, redis-hot): 10,000 per 10 ms is a million requests a second on ONE key,
#   five times what one Redis can decide (it spends >= 5 us of CPU per decision) and far beyond
#   what a proxied request can reach here (every request also crosses the demo upstream); a log
#   of 10,000 in a 1 h window would be reached within a second. The set then holds only the last
#   10 ms of entries, so Redis cannot show every allowed decision as an entry: the verification
#   counts EVALSHA calls instead (at most one decision per open connection in each call).
# - 100,000 keys (redis-keys, otp-body, login-outcome, gcra): 10,000 per hour per key, so every
#   allowed decision of the log stays in its sorted set for the ZCARD check; a key gets about
#   1/100,000 of the load (see the BENCH_USERS check above).
# - batch: 10,000 per day and per week, over 100,000 keys (bench/batch_client.py's keyspace).
HOT_NEVER=$(limit_toml never 10000 10ms sliding_log)
KEY_NEVER=$(limit_toml never 10000 1h sliding_log)
if [[ $OTP_NORMALIZE == 1 ]]; then
    OTP_KEY='[{ part = "json:phone", normalize = "phone", region = "ID" }]'
else
    OTP_KEY='["json:phone"]'
fi
for t in "${GW_TARGETS[@]}" "${BASE_TARGETS[@]}"; do
    wants "$t" || continue
    pick_port "PORT[$t]"
    pick_port "ADMIN[$t]"
    GW_BIN[$t]=${GW_BIN[$t]:-$GATEWAY_BIN}
    route=${t%-base} # a -base twin runs its target's route, under the same name
    case $route in
    proxy) gw_config "$t" memory "$(route_toml "$route" "/*" "")" ;;
    memory) gw_config "$t" memory "$(route_toml "$route" "/*" '["route"]')
$HOT_NEVER" ;;
    redis-hot) gw_config "$t" redis "$(route_toml "$route" "/*" '["route"]')
$HOT_NEVER" ;;
    redis-keys) gw_config "$t" redis "$(route_toml "$route" "/*" '["header:X-User"]')
$KEY_NEVER" ;;
    redis-keys-acks) gw_config "$t" redis-acks "$(route_toml "$route" "/*" '["header:X-User"]')
$KEY_NEVER" ;;
    deny) gw_config "$t" redis "$(route_toml "$route" "/*" '["route"]')
$(limit_toml one 1 1h sliding_log)" ;;
    otp-body) gw_config "$t" redis "$(route_toml "$route" "/*" "$OTP_KEY" 'methods = ["POST"]')
$(limit_toml per-phone 10000 1h sliding_log)" ;;
    login-outcome | login-leave) gw_config "$t" redis "$(route_toml "$route" "/*" '["header:X-User"]')
$(limit_toml failed-logins 10000 1h sliding_log 'count_status = [401]')" ;;
    gcra) gw_config "$t" redis "$(route_toml "$route" "/*" '["header:X-User"]')
$(limit_toml never 10000 1h gcra)" ;;
    batch) gw_config "$t" redis "$(route_toml "$route" "/batch/*" "")
$(limit_toml day 10000 1d sliding_log)
$(limit_toml week 10000 7d sliding_log)" ;;
    rls)
        pick_port RLS_PORT
        printf 'domain: bench\ndescriptors:\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 10000, name: never }\n' \
            >"$TMP/rls-limits.yaml"
        GRPC_PORT[rls]=$RLS_PORT
        gw_config "$t" redis "[rls]
listen = \"127.0.0.1:$RLS_PORT\"
config = \"$TMP/rls-limits.yaml\"" ;;
    ext-authz)
        pick_port "GRPC_PORT[ext-authz]"
        gw_config "$t" redis "$(route_toml "$route" "/*" "$OTP_KEY" 'methods = ["POST"]')
$(limit_toml per-phone 10000 1h sliding_log)

[ext_authz]
listen = \"127.0.0.1:${GRPC_PORT[ext-authz]}\"" ;;
    esac
    "${GW_BIN[$t]}" check --config "$TMP/gw-$t.toml" >"$TMP/gw-$t-check.out" 2>&1 \
        || { cat "$TMP/gw-$t-check.out" >&2; die "generated slidegate config for $t is invalid (${GW_BIN[$t]} check)"; }
    log "starting slidegate ($t) on 127.0.0.1:${PORT[$t]} (admin 127.0.0.1:${ADMIN[$t]})"
    gw_env=(env -u SLIDEGATE_REDIS_URL -u SLIDEGATE_CONFIG -u SLIDEGATE_LOG_FORMAT SLIDEGATE_LOG=warn
        SLIDEGATE_ADMIN_TOKEN="$ADMIN_TOKEN")
    [[ -n $GW_WORKERS ]] && gw_env+=(TOKIO_WORKER_THREADS="$GW_WORKERS")
    start "gw-$t" "${gw_env[@]}" "${GW_BIN[$t]}" --config "$TMP/gw-$t.toml"
    GROUP[gw-$t]=${PIDS[-1]}
    wait_http "slidegate ($t) admin" "http://127.0.0.1:${ADMIN[$t]}/readyz"
    # Readiness through the proxy only where a request costs no limit state.
    case $route in proxy) wait_http "slidegate ($t)" "http://127.0.0.1:${PORT[$t]}$URL_PATH" ;;
    rls) wait_port "slidegate ($t) rate-limit service" "$RLS_PORT" ;;
    ext-authz) wait_port "slidegate ($t) ext_authz" "${GRPC_PORT[ext-authz]}" ;;
    *) wait_port "slidegate ($t)" "${PORT[$t]}" ;; esac
done

# ---------------------------------------------------------------- measurement helpers
# group_ticks GROUP: sets TICKS to the utime+stime (clock ticks) of the group's processes, each
# with all its threads (/proc/PID/stat counts the whole thread group). Builtins only.
group_ticks() {
    local pid line rest
    local -a f
    TICKS=0
    for pid in ${GROUP[$1]:-}; do
        read -r line <"/proc/$pid/stat" 2>/dev/null || continue
        rest=${line##*) } # comm may hold spaces; fields resume after ") "
        read -r -a f <<<"$rest"
        TICKS=$((TICKS + f[11] + f[12])) # fields 14 and 15: utime, stime
    done
}
declare -A SNAP=()
snap_all() { # snap_all TAG: ticks of every group into SNAP[TAG,group]
    local g
    for g in "${!GROUP[@]}"; do
        group_ticks "$g"
        SNAP[$1,$g]=$TICKS
    done
}
# children_cpu: CHILD_MS = CPU ms (user+sys) of every child this shell has reaped so far, with
# their reaped descendants (the `times` builtin; must run in this shell, not a subshell).
children_cpu() {
    local line re='^([0-9]+)m([0-9]+)\.([0-9]+)s ([0-9]+)m([0-9]+)\.([0-9]+)s$'
    times >"$TMP/times.out"
    { read -r _ && read -r line; } <"$TMP/times.out"
    if [[ $line =~ $re ]]; then
        CHILD_MS=$(((10#${BASH_REMATCH[1]} * 60 + 10#${BASH_REMATCH[2]}) * 1000 + 10#${BASH_REMATCH[3]}
            + (10#${BASH_REMATCH[4]} * 60 + 10#${BASH_REMATCH[5]}) * 1000 + 10#${BASH_REMATCH[6]}))
    else
        CHILD_MS=0
    fi
}
# us_per GROUP_OR_EMPTY N: CPU microseconds per unit between the "a" and "b" snapshots.
us_per() {
    local g=$1 n=$2
    if [[ -z ${GROUP[$g]:-} ]] || ((n <= 0)); then echo "-"; return; fi
    awk -v d=$((SNAP[b,$g] - SNAP[a,$g])) -v hz="$CLK_TCK" -v n="$n" 'BEGIN { printf "%.1f", d * 1e6 / hz / n }'
}
# evalsha_stats: "calls failed_calls" of the decision calls so far, EVALSHA and FCALL together
# (INFO commandstats; slidegate uses FCALL on a server with Functions, store.scripts = "auto").
evalsha_stats() {
    rcli info commandstats 2>/dev/null | tr -d '\r' | awk -F'[:=,]' '
        $1 == "cmdstat_evalsha" || $1 == "cmdstat_fcall" { for (i = 2; i < NF; i += 2) v[$i] += $(i + 1) }
        END { printf "%d %d\n", v["calls"], v["failed_calls"] }'
}
# gw_metrics TARGET: "allowed rejected blocked delayed shadow err_allowed err_denied cache_hits
# store_errors upstream_4xx refunds" from that slidegate's /metrics.
gw_metrics() {
    local t=$1 m
    m=$(curl -fsS --max-time 5 "http://127.0.0.1:${ADMIN[$t]}/metrics") || die "cannot read /metrics of slidegate ($t)"
    awk '
        index($0, "slidegate_requests_total{") == 1 {
            match($0, /decision="[a-z_]+"/); d = substr($0, RSTART + 10, RLENGTH - 11); v[d] += $NF }
        index($0, "slidegate_deny_cache_hits_total{") == 1 { hits += $NF }
        index($0, "slidegate_store_errors_total{") == 1 { errs += $NF }
        index($0, "slidegate_upstream_requests_total{") == 1 && index($0, "status=\"4xx\"") { up4 += $NF }
        index($0, "slidegate_outcome_refunds_total{") == 1 { refunds += $NF }
        END { printf "%d %d %d %d %d %d %d %d %d %d %d\n", v["allowed"], v["rejected"], v["blocked"],
            v["delayed"], v["shadow_rejected"], v["store_error_allowed"], v["store_error_denied"],
            hits, errs, up4, refunds }' <<<"$m"
}
# store_decisions "METRICS": decisions that reached the store (allowed + rejected + blocked,
# minus the rejections the deny cache answered).
store_decisions() {
    local a r b _d _s _ea _ed hits _rest
    read -r a r b _d _s _ea _ed hits _rest <<<"$1"
    echo $((a + r + b - hits))
}

# wrk_field FILE: prints "rps p50_ms p99_ms non2xx socket_errors completed_requests".
wrk_field() {
    awk '
        function ms(v,  n, u) {
            n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
            if (u == "us") return n / 1000
            if (u == "ms") return n
            if (u == "s")  return n * 1000
            if (u == "m")  return n * 60000
            return -1
        }
        /^Requests\/sec:/                 { rps = $2 }
        $1 == "50%"                       { p50 = ms($2) }
        $1 == "99%"                       { p99 = ms($2) }
        /Non-2xx or 3xx responses:/       { non2xx = $NF }
        /Socket errors:/                  { gsub(/,/, ""); errs = $4 + $6 + $8 + $10 }
        / requests in /                   { done = $1 }
        END {
            if (rps == "" || p50 == "" || p99 == "") exit 1
            printf "%s %.3f %.3f %d %d %d\n", rps, p50, p99, non2xx + 0, errs + 0, done + 0
        }' "$1"
}
# wrk_counts FILE: "completed non2xx" (works for warm-ups, which run without --latency).
wrk_counts() {
    awk '/ requests in / { done = $1 } /Non-2xx or 3xx responses:/ { non2xx = $NF }
        END { printf "%d %d\n", done + 0, non2xx + 0 }' "$1"
}

median() { # median of the numbers given as arguments (mean of the middle two when even)
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
        if (NR == 0) { printf "-"; exit }
        if (NR % 2) printf "%.3f", v[(NR + 1) / 2]; else printf "%.3f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
median_of() { # median_of TARGET FIELD: over the measured rounds recorded in R[TARGET,ROUND,FIELD]
    local vals=() r v
    for ((r = 1; r <= ROUNDS; r++)); do
        v=${R[$1,$r,$2]:-}
        [[ -n $v && $v != - ]] && vals+=("$v")
    done
    if ((${#vals[@]})); then median "${vals[@]}"; else echo "-"; fi
}

# ---------------------------------------------------------------- 5. wrk targets
declare -A R=()     # R[target,round,field]: per measured run
declare -A TOT=()   # TOT[target,field]: every run incl. warm-ups (completed, ok2xx, runs)
add_tot() { TOT[$1,$2]=$((${TOT[$1,$2]:-0} + $3)); }

wrk_cmd() { # wrk_cmd TARGET SECONDS [--latency]: the wrk command line, into WRK
    local t=$1 s=$2 c=$CONNS
    [[ $t == login-leave ]] && c=$((CONNS - LEAVERS)) # the other clients leave (bench/leaver.py)
    WRK=(timeout $((s + 30)) wrk -t"$THREADS" -c"$c" -d"${s}s")
    [[ ${3:-} == --latency ]] && WRK+=(--latency)
    [[ -n ${KEYED[$t]:-} ]] && WRK+=(-s "$ROOT/bench/${KEYED[$t]}")
    WRK+=("http://127.0.0.1:${PORT[$t]}$URL_PATH")
}

# leave_start TARGET SECONDS FILE: login-leave's leaving clients, in the background, for as
# long as wrk runs (their one-line report into FILE); leave_end FILE: waits for them and sets
# LEFT and LEFT_FIRST (their attempts, and those answered before they left). Other targets:
# nothing, 0.
leave_start() {
    LEAVER_PID=""
    [[ $1 == login-leave ]] || return 0
    timeout $(($2 + 30)) python3 "$ROOT/bench/leaver.py" 127.0.0.1 "${PORT[$1]}" "$LEAVERS" "$2" "$USERS" \
        "$LEAVE_MS" >"$3" 2>&1 &
    LEAVER_PID=$!
}
leave_end() {
    LEFT=0 LEFT_FIRST=0
    [[ -n $LEAVER_PID ]] || return 0
    wait "$LEAVER_PID" || die "bench/leaver.py failed: $(cat "$1")"
    LEAVER_PID=""
    read -r LEFT LEFT_FIRST < <(sed -n 's/^attempts=\([0-9]*\) answered_first=\([0-9]*\)$/\1 \2/p' "$1") || true
    [[ $LEFT =~ ^[0-9]+$ && $LEFT_FIRST =~ ^[0-9]+$ ]] || die "bench/leaver.py: no report in $1"
}

measure_wrk() { # measure_wrk TARGET ROUND
    local t=$1 r=$2 out="$TMP/wrk-$1-$2.txt" c0 n_done non2xx rps p50 p99 errs m0="" m1="" e0 e1 f0 f1 dec
    local left
    if ((WARMUP > 0)); then
        wrk_cmd "$t" "$WARMUP"
        leave_start "$t" "$WARMUP" "$TMP/leaver-warmup-$t-$r.txt"
        run_fg "${WRK[@]}" >"$TMP/warmup-$t-$r.txt" 2>&1 || die "wrk warm-up against $t failed"
        leave_end "$TMP/leaver-warmup-$t-$r.txt"
        add_tot "$t" left "$LEFT"
        add_tot "$t" left_first "$LEFT_FIRST"
        read -r n_done non2xx < <(wrk_counts "$TMP/warmup-$t-$r.txt")
        add_tot "$t" completed "$n_done"
        add_tot "$t" ok2xx $((n_done - non2xx))
        add_tot "$t" runs 1
    fi
    wrk_cmd "$t" "$SECONDS_PER_RUN" --latency
    [[ ${FRONT[$t]} == gw-* ]] && m0=$(gw_metrics "$t")
    read -r e0 f0 < <(evalsha_stats)
    snap_all a
    children_cpu
    c0=$CHILD_MS
    leave_start "$t" "$SECONDS_PER_RUN" "$TMP/leaver-$t-$r.txt"
    run_fg "${WRK[@]}" >"$out" 2>&1 || { cat "$out" >&2; die "wrk against $t failed"; }
    leave_end "$TMP/leaver-$t-$r.txt"
    left=$LEFT
    children_cpu
    snap_all b
    read -r e1 f1 < <(evalsha_stats)
    [[ ${FRONT[$t]} == gw-* ]] && m1=$(gw_metrics "$t")
    read -r rps p50 p99 non2xx errs n_done < <(wrk_field "$out") || die "could not parse wrk output for $t round $r"
    add_tot "$t" completed "$n_done"
    add_tot "$t" ok2xx $((n_done - non2xx))
    add_tot "$t" runs 1
    add_tot "$t" left "$left"
    add_tot "$t" left_first "$LEFT_FIRST"
    R[$t,$r,rps]=$rps R[$t,$r,p50]=$p50 R[$t,$r,p99]=$p99 R[$t,$r,non2xx]=$non2xx
    R[$t,$r,sockerr]=$errs R[$t,$r,done]=$n_done R[$t,$r,left]=$left
    # CPU per attempt: the ones that left cost the gateway too
    R[$t,$r,front]=$(us_per "${FRONT[$t]}" $((n_done + left)))
    R[$t,$r,redis]=$(us_per redis $((n_done + left)))
    R[$t,$r,upstream]=$(us_per upstream $((n_done + left)))
    R[$t,$r,client]=$(awk -v ms=$((CHILD_MS - c0)) -v n="$n_done" 'BEGIN { printf "%.1f", (n > 0 ? ms * 1000 / n : 0) }')
    R[$t,$r,evalsha]=$((e1 - e0)) R[$t,$r,evalsha_failed]=$((f1 - f0))
    # Decisions made in Redis during the measured run: the peer makes one per request; slidegate
    # says how many it made in its /metrics.
    dec=0
    if [[ -n ${USES_REDIS[$t]:-} ]]; then
        if [[ -n $m0 ]]; then
            dec=$(($(store_decisions "$m1") - $(store_decisions "$m0")))
        else
            dec=$n_done
        fi
    fi
    R[$t,$r,decisions]=$dec
    R[$t,$r,redis_dec]=$(us_per redis "$dec")
}

if ((${#WRK_TARGETS[@]})); then
    log "load: wrk -t$THREADS -c$CONNS -d${SECONDS_PER_RUN}s --latency (warm-up ${WARMUP}s), $ROUNDS round(s)," \
        "targets: ${WRK_TARGETS[*]}"
    for ((r = 1; r <= ROUNDS; r++)); do
        # Odd rounds in the listed order, even rounds reversed, so slow drift hits every target.
        order=("${WRK_TARGETS[@]}")
        if ((r % 2 == 0)); then
            order=()
            for ((i = ${#WRK_TARGETS[@]} - 1; i >= 0; i--)); do order+=("${WRK_TARGETS[i]}"); done
        fi
        for t in "${order[@]}"; do
            log "round $r/$ROUNDS: $t"
            measure_wrk "$t" "$r"
        done
    done
fi

# ---------------------------------------------------------------- 6. batch API vs redis-benchmark
# Both decide the same two-limit sliding log (1d and 7d, never reached) for distinct keys from a
# keyspace of BATCH_BODIES * BATCH_KEYS, on the same Redis; decisions/s for both.
RB_KEYSPACE=$((BATCH_BODIES * BATCH_KEYS))
measure_batch() { # measure_batch ROUND
    local r=$1 out="$TMP/batch-$1.txt" c0 e0 e1 f0 f1 kv
    local -A B=()
    local client=(python3 "$ROOT/bench/batch_client.py" 127.0.0.1 "${ADMIN[batch]}" batch)
    local opts=(--conns "$BATCH_CONNS" --keys "$BATCH_KEYS" --bodies "$BATCH_BODIES" --prefix u)
    if ((WARMUP > 0)); then
        run_fg env BENCH_ADMIN_TOKEN="$ADMIN_TOKEN" timeout $((WARMUP + 60)) "${client[@]}" "$WARMUP" "${opts[@]}" \
            >"$TMP/batch-warmup-$r.txt" 2>&1 || { cat "$TMP/batch-warmup-$r.txt" >&2; die "batch client warm-up failed"; }
        for kv in $(head -n 1 "$TMP/batch-warmup-$r.txt"); do B[${kv%%=*}]=${kv#*=}; done
        add_tot batch allowed "${B[allowed]:-0}"
        add_tot batch denied "${B[denied]:-0}"
        add_tot batch errors "${B[errors]:-0}"
    fi
    read -r e0 f0 < <(evalsha_stats)
    snap_all a
    children_cpu
    c0=$CHILD_MS
    run_fg env BENCH_ADMIN_TOKEN="$ADMIN_TOKEN" timeout $((SECONDS_PER_RUN + 60)) "${client[@]}" "$SECONDS_PER_RUN" "${opts[@]}" \
        >"$out" 2>&1 || { cat "$out" >&2; die "batch client failed"; }
    children_cpu
    snap_all b
    read -r e1 f1 < <(evalsha_stats)
    B=()
    for kv in $(head -n 1 "$out"); do B[${kv%%=*}]=${kv#*=}; done
    [[ -n ${B[dps]:-} && ${B[decisions]:-0} -gt 0 ]] || { cat "$out" >&2; die "no decisions from the batch client"; }
    add_tot batch allowed "${B[allowed]}"
    add_tot batch denied "${B[denied]}"
    add_tot batch errors "${B[errors]}"
    R[batch,$r,rps]=${B[dps]} R[batch,$r,p50]=${B[p50_ms]} R[batch,$r,p99]=${B[p99_ms]}
    R[batch,$r,done]=${B[decisions]} R[batch,$r,decisions]=${B[decisions]} R[batch,$r,calls]=${B[calls]}
    R[batch,$r,front]=$(us_per gw-batch "${B[decisions]}")
    R[batch,$r,redis]=$(us_per redis "${B[decisions]}")
    R[batch,$r,redis_dec]=${R[batch,$r,redis]}
    R[batch,$r,upstream]="-"
    R[batch,$r,client]=$(awk -v ms=$((CHILD_MS - c0)) -v n="${B[decisions]}" 'BEGIN { printf "%.1f", ms * 1000 / n }')
    R[batch,$r,evalsha]=$((e1 - e0)) R[batch,$r,evalsha_failed]=$((f1 - f0))
}
RB_N=0
measure_rb() { # measure_rb ROUND
    local r=$1 out="$TMP/rb-$1.csv" c0 e0 e1 f0 f1 rps p50 p99 line n
    # The options, then the command: anything after EVALSHA is an argument of the script.
    local opts=(redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -c "$RB_CLIENTS" -P "$RB_PIPELINE"
        -r "$RB_KEYSPACE" --csv)
    local cmd=(EVALSHA "$PEER_SHA" 3 'rb:{__rand_int__}:day' 'rb:{__rand_int__}:week'
        'rb:{__rand_int__}#block' "" 1 0 't__rand_int__-__rand_int__' "$NEVER" 86400000000 "$NEVER" 604800000000)
    # redis-benchmark runs a number of requests, not a time: a calibration run (the warm-up)
    # sizes the measured run to about BENCH_SECONDS.
    if ((RB_N == 0)); then
        run_fg timeout 120 "${opts[@]}" -n 20000 "${cmd[@]}" >"$TMP/rb-calibrate.csv" 2>&1 \
            || { cat "$TMP/rb-calibrate.csv" >&2; die "redis-benchmark calibration failed"; }
        rps=$(awk -F'","' 'NR == 2 { print $2 + 0 }' "$TMP/rb-calibrate.csv")
        RB_N=$(awk -v rps="${rps:-0}" -v s="$SECONDS_PER_RUN" 'BEGIN { n = int(rps * s); print (n < 20000 ? 20000 : n) }')
    elif ((WARMUP > 0)); then
        run_fg timeout $((WARMUP * 10 + 60)) "${opts[@]}" -n $((RB_N * WARMUP / SECONDS_PER_RUN + 1)) "${cmd[@]}" \
            >"$TMP/rb-warmup-$r.csv" 2>&1 || { cat "$TMP/rb-warmup-$r.csv" >&2; die "redis-benchmark warm-up failed"; }
    fi
    read -r e0 f0 < <(evalsha_stats)
    snap_all a
    children_cpu
    c0=$CHILD_MS
    run_fg timeout $((SECONDS_PER_RUN * 10 + 120)) "${opts[@]}" -n "$RB_N" "${cmd[@]}" >"$out" 2>&1 \
        || { cat "$out" >&2; die "redis-benchmark failed"; }
    children_cpu
    snap_all b
    read -r e1 f1 < <(evalsha_stats)
    line=$(awk -F'","' 'NR == 2 { print $2, $5, $7 }' "$out") # "test","rps","avg","min","p50","p95","p99","max"
    read -r rps p50 p99 <<<"$line"
    [[ -n ${rps:-} ]] || { cat "$out" >&2; die "could not parse redis-benchmark output"; }
    # One EVALSHA is one decision; Redis counts them exactly (redis-benchmark may round -n up to
    # whole pipelines).
    n=$((e1 - e0))
    ((n > 0)) || die "redis-benchmark ran no EVALSHA"
    R[redis-benchmark,$r,rps]=$rps R[redis-benchmark,$r,p50]=$p50 R[redis-benchmark,$r,p99]=$p99
    R[redis-benchmark,$r,done]=$n R[redis-benchmark,$r,decisions]=$n
    R[redis-benchmark,$r,front]="-" R[redis-benchmark,$r,upstream]="-"
    R[redis-benchmark,$r,redis]=$(us_per redis "$n")
    R[redis-benchmark,$r,redis_dec]=${R[redis-benchmark,$r,redis]}
    R[redis-benchmark,$r,client]=$(awk -v ms=$((CHILD_MS - c0)) -v n="$n" 'BEGIN { printf "%.1f", ms * 1000 / n }')
    R[redis-benchmark,$r,evalsha]=$((e1 - e0)) R[redis-benchmark,$r,evalsha_failed]=$((f1 - f0))
}
if wants batch; then
    PEER_SHA=$(rcli -x script load <"$ROOT/bench/peer/sliding_log.lua" 2>&1 | tr -d '\r') || true
    [[ $PEER_SHA =~ ^[0-9a-f]{40}$ ]] || die "SCRIPT LOAD of bench/peer/sliding_log.lua failed: $PEER_SHA"
    log "batch: POST /v1/decisions ($BATCH_KEYS keys per call, $BATCH_CONNS connection(s)) vs" \
        "redis-benchmark -P $RB_PIPELINE -c $RB_CLIENTS, ${SECONDS_PER_RUN}s, $ROUNDS round(s)"
    for ((r = 1; r <= ROUNDS; r++)); do
        if ((r % 2)); then order=(batch redis-benchmark); else order=(redis-benchmark batch); fi
        for t in "${order[@]}"; do
            log "round $r/$ROUNDS: $t"
            if [[ $t == batch ]]; then measure_batch "$r"; else measure_rb "$r"; fi
        done
    done
fi

# ---------------------------------------------------------------- 6b. Envoy's gRPC services
# bench/rls/load.rs: ShouldRateLimit calls, one descriptor (user=<one of BENCH_USERS>) each, or
# (ext-authz) Check calls with a JSON body keyed by phone, as fast as answers come (peak); the
# rate-limit service then paced at half the peak (p99 at half load). decisions/s.
RLS_LOAD="$ROOT/target/release/examples/rls_load"
declare -A GRPC_SERVICE=([rls]=rls [ext-authz]=check)
grpc_load() { # grpc_load TARGET SECONDS OUT [--rate R]: one run of the load generator into OUT
    local t=$1 s=$2 out=$3
    shift 3
    run_fg timeout $((s + 60)) "$RLS_LOAD" "127.0.0.1:${GRPC_PORT[$t]}" "$s" --keys "$USERS" \
        --service "${GRPC_SERVICE[$t]}" --conns "$RLS_CONNS" --in-flight "$RLS_IN_FLIGHT" "$@" >"$out" 2>&1 \
        || { cat "$out" >&2; die "the $t load generator failed"; }
}
grpc_totals() { # grpc_totals TARGET: adds a run's allowed, denied and errors (in L) to the totals
    add_tot "$1" allowed "${L[allowed]:-0}"
    add_tot "$1" denied "${L[denied]:-0}"
    add_tot "$1" errors "${L[errors]:-0}"
}
measure_grpc() { # measure_grpc TARGET ROUND
    local t=$1 r=$2 out="$TMP/$1-$2.txt" c0 e0 e1 f0 f1 kv
    local -A L=()
    if ((WARMUP > 0)); then
        grpc_load "$t" "$WARMUP" "$TMP/$t-warmup-$r.txt"
        for kv in $(head -n 1 "$TMP/$t-warmup-$r.txt"); do L[${kv%%=*}]=${kv#*=}; done
        grpc_totals "$t"
    fi
    read -r e0 f0 < <(evalsha_stats)
    snap_all a
    children_cpu
    c0=$CHILD_MS
    grpc_load "$t" "$SECONDS_PER_RUN" "$out"
    children_cpu
    snap_all b
    read -r e1 f1 < <(evalsha_stats)
    L=()
    for kv in $(head -n 1 "$out"); do L[${kv%%=*}]=${kv#*=}; done
    [[ -n ${L[dps]:-} && ${L[decisions]:-0} -gt 0 ]] || { cat "$out" >&2; die "no decisions from the $t load generator"; }
    grpc_totals "$t"
    R[$t,$r,rps]=${L[dps]} R[$t,$r,p50]=${L[p50_ms]} R[$t,$r,p99]=${L[p99_ms]}
    R[$t,$r,done]=${L[decisions]} R[$t,$r,decisions]=${L[decisions]}
    R[$t,$r,front]=$(us_per "gw-$t" "${L[decisions]}")
    R[$t,$r,redis]=$(us_per redis "${L[decisions]}")
    R[$t,$r,redis_dec]=${R[$t,$r,redis]}
    R[$t,$r,upstream]="-"
    R[$t,$r,client]=$(awk -v ms=$((CHILD_MS - c0)) -v n="${L[decisions]}" 'BEGIN { printf "%.1f", ms * 1000 / n }')
    R[$t,$r,evalsha]=$((e1 - e0)) R[$t,$r,evalsha_failed]=$((f1 - f0))
}
declare -A GRPC_WHAT=([rls]="ShouldRateLimit, one descriptor per call" [ext-authz]="Check, a 200-byte JSON body keyed by phone per call")
for t in rls ext-authz; do
    wants "$t" || continue
    log "$t: ${GRPC_WHAT[$t]}, $USERS keys, $RLS_CONNS connection(s) x $RLS_IN_FLIGHT" \
        "in flight, ${SECONDS_PER_RUN}s, $ROUNDS round(s)"
    for ((r = 1; r <= ROUNDS; r++)); do
        log "round $r/$ROUNDS: $t"
        measure_grpc "$t" "$r"
    done
done

# ---------------------------------------------------------------- 7. p99 at half of peak load
declare -A HALF_P99=() HALF_RPS=() HALF_Q=() HALF_NON200=()
if ((${#HEY_TARGETS[@]})); then
    lowest=""
    for t in "${HEY_TARGETS[@]}"; do
        peak=$(median_of "$t" rps)
        [[ $peak != - ]] || die "no measured req/s for $t"
        [[ -z $lowest ]] || awk -v a="$peak" -v b="$lowest" 'BEGIN { exit !(a < b) }' && lowest=$peak
    done
    for t in "${HEY_TARGETS[@]}"; do
        peak=$(median_of "$t" rps)
        [[ $HALF_RATE == common ]] && peak=$lowest
        # hey -q is per worker: the total rate is -c times -q.
        HALF_Q[$t]=$(awk -v p="$peak" -v c="$HEY_CONNS" 'BEGIN { q = p / 2 / c; printf "%.1f", (q < 0.1 ? 0.1 : q) }')
        log "half load: hey -z ${HALF_SECONDS}s -c $HEY_CONNS -q ${HALF_Q[$t]} against $t"
        out="$TMP/hey-$t.txt"
        run_fg timeout $((HALF_SECONDS + 60)) hey -z "${HALF_SECONDS}s" -c "$HEY_CONNS" -q "${HALF_Q[$t]}" \
            "http://127.0.0.1:${PORT[$t]}$URL_PATH" >"$out" 2>&1 || { cat "$out" >&2; die "hey against $t failed"; }
        read -r h_rps h_p99 h_bad < <(awk '
            /Requests\/sec:/ { rps = $2 }
            /99%+ in / { p99 = $3 * 1000 }
            /^[ \t]*\[[0-9]+\][ \t]+[0-9]+ responses/ { c = $1; gsub(/[][]/, "", c); if (c != "200") bad += $2 }
            /^Error distribution:/ { errors = 1; next }
            errors && /^[ \t]*\[[0-9]+\]/ { c = $1; gsub(/[][]/, "", c); bad += c } # failed requests
            END { if (rps == "" || p99 == "") exit 1; printf "%.1f %.3f %d\n", rps, p99, bad + 0 }' "$out") \
            || { cat "$out" >&2; die "could not parse hey output for $t"; }
        HALF_RPS[$t]=$h_rps HALF_P99[$t]=$h_p99 HALF_NON200[$t]=$h_bad
        awk -v got="$h_rps" -v q="${HALF_Q[$t]}" -v c="$HEY_CONNS" 'BEGIN { exit !(got < 0.9 * q * c) }' \
            && log "WARN: hey reached $h_rps req/s of the $(awk -v q="${HALF_Q[$t]}" -v c="$HEY_CONNS" \
                'BEGIN { printf "%.0f", q * c }') asked against $t (load generator or machine saturated)"
        # Requests hey sent to a limited target count for the Redis checks below.
        done_h=$(awk '/^[ \t]*\[[0-9]+\][ \t]+[0-9]+ responses/ { n += $2 }
            /^Error distribution:/ { errors = 1; next }
            errors && /^[ \t]*\[[0-9]+\]/ { c = $1; gsub(/[][]/, "", c); n += c }
            END { print n + 0 }' "$out")
        add_tot "$t" completed "$done_h"
        add_tot "$t" ok2xx $((done_h - HALF_NON200[$t]))
        add_tot "$t" runs 1
    done
fi

# The keyed targets at half load: hey sends one request over and over, so it cannot vary the
# key; wrk with the target's own script, paced by bench/wrk_pace.lua (BENCH_RATE, all threads
# together), stands in for it. Same connections as the peak runs.
declare -A PACED_P99=() PACED_RPS=() PACED_RATE=() PACED_NON2XX=()
if ((${#PACED_TARGETS[@]})); then
    lowest=""
    for t in "${PACED_TARGETS[@]}"; do
        peak=$(median_of "$t" rps)
        [[ $peak != - ]] || die "no measured req/s for $t"
        [[ -z $lowest ]] || awk -v a="$peak" -v b="$lowest" 'BEGIN { exit !(a < b) }' && lowest=$peak
    done
    for t in "${PACED_TARGETS[@]}"; do
        peak=$(median_of "$t" rps)
        [[ $HALF_RATE == common ]] && peak=$lowest
        PACED_RATE[$t]=$(awk -v p="$peak" 'BEGIN { r = p / 2; printf "%.0f", (r < 1 ? 1 : r) }')
        log "half load: wrk -t$THREADS -c$CONNS -d${HALF_SECONDS}s paced at ${PACED_RATE[$t]} req/s against $t"
        wrk_cmd "$t" "$HALF_SECONDS" --latency
        out="$TMP/paced-$t.txt"
        run_fg env BENCH_RATE="${PACED_RATE[$t]}" "${WRK[@]}" >"$out" 2>&1 || { cat "$out" >&2; die "paced wrk against $t failed"; }
        read -r p_rps _ p_p99 p_non2xx _ p_done < <(wrk_field "$out") || die "could not parse paced wrk output for $t"
        PACED_RPS[$t]=$p_rps PACED_P99[$t]=$p_p99 PACED_NON2XX[$t]=$p_non2xx
        awk -v got="$p_rps" -v want="${PACED_RATE[$t]}" 'BEGIN { exit !(got < 0.9 * want) }' \
            && log "WARN: paced wrk reached $p_rps req/s of the ${PACED_RATE[$t]} asked against $t (machine saturated)"
        add_tot "$t" completed "$p_done"
        add_tot "$t" ok2xx $((p_done - p_non2xx))
        add_tot "$t" runs 1
    done
fi

# The rate-limit service at half its own peak: the load generator paced, each call's latency
# counted from when it was due.
RLS_HALF_P99="" RLS_HALF_RPS="" RLS_HALF_RATE=""
if wants rls && ((HALF)); then
    peak=$(median_of rls rps)
    [[ $peak != - ]] || die "no measured decisions/s for rls"
    RLS_HALF_RATE=$(awk -v p="$peak" 'BEGIN { r = p / 2; printf "%.0f", (r < 1 ? 1 : r) }')
    log "half load: rls load generator paced at $RLS_HALF_RATE calls/s for ${HALF_SECONDS}s"
    grpc_load rls "$HALF_SECONDS" "$TMP/rls-half.txt" --rate "$RLS_HALF_RATE"
    declare -A L=()
    for kv in $(head -n 1 "$TMP/rls-half.txt"); do L[${kv%%=*}]=${kv#*=}; done
    grpc_totals rls
    RLS_HALF_P99=${L[p99_ms]:-} RLS_HALF_RPS=${L[dps]:-}
    awk -v got="$RLS_HALF_RPS" -v want="$RLS_HALF_RATE" 'BEGIN { exit !(got < 0.9 * want) }' \
        && log "WARN: the paced rls run reached $RLS_HALF_RPS of the $RLS_HALF_RATE calls/s asked (machine saturated)"
fi

# ---------------------------------------------------------------- 8. results
fmt_num() { # thousands separators for a req/s figure
    awk -v v="$1" 'BEGIN { if (v == "-") { print "-"; exit } s = sprintf("%.0f", v); out = "";
        while (length(s) > 3) { out = "," substr(s, length(s) - 2) out; s = substr(s, 1, length(s) - 3) }
        print s out }'
}
RESULT_TARGETS=("${WRK_TARGETS[@]}")
wants batch && RESULT_TARGETS+=(batch redis-benchmark)
wants rls && RESULT_TARGETS+=(rls)
wants ext-authz && RESULT_TARGETS+=(ext-authz)
declare -A MED=()
for t in "${RESULT_TARGETS[@]}"; do
    for f in rps p50 p99; do MED[$t,$f]=$(median_of "$t" "$f"); done
    for f in front redis upstream client redis_dec; do # CPU: one decimal is plenty
        MED[$t,$f]=$(median_of "$t" "$f" | awk '{ if ($1 == "-") print "-"; else printf "%.1f", $1 }')
    done
done
ratio() { # ratio TARGET: median rate over the anchor's, or "-"
    local a=${ANCHOR[$1]:-}
    if [[ -z $a || -z ${MED[$a,rps]:-} || ${MED[$a,rps]} == - ]]; then echo "-"; return; fi
    awk -v x="${MED[$1,rps]}" -v y="${MED[$a,rps]}" 'BEGIN { if (y > 0) printf "%.2fx", x / y; else print "-" }'
}

echo
echo "slidegate and its anchors — wrk -t$THREADS -c$CONNS -d${SECONDS_PER_RUN}s --latency http://127.0.0.1:PORT$URL_PATH" \
    "(warm-up ${WARMUP}s, $ROUNDS round(s), order reversed every other round)"
echo "machine: $(nproc) CPU(s); load generator, proxies, demo upstream and redis share them." \
    "CPU columns: microseconds of CPU per request (per decision for batch/redis-benchmark), from /proc/PID/stat"
echo
printf '%-5s %-15s %12s %9s %9s %8s %8s %9s %8s %8s %8s %8s %9s\n' round target "req/s" "p50 ms" "p99 ms" \
    non-2xx sockerr front-us redis-us up-us client-us evalsha "dec/call"
for ((r = 1; r <= ROUNDS; r++)); do
    for t in "${RESULT_TARGETS[@]}"; do
        [[ -n ${R[$t,$r,rps]:-} ]] || continue
        dpc=$(awk -v d="${R[$t,$r,decisions]}" -v e="${R[$t,$r,evalsha]}" 'BEGIN { if (e > 0) printf "%.1f", d / e; else print "-" }')
        printf '%-5s %-15s %12.0f %9.3f %9.3f %8s %8s %9s %8s %8s %8s %8s %9s\n' "$r" "$t" "${R[$t,$r,rps]}" \
            "${R[$t,$r,p50]}" "${R[$t,$r,p99]}" "${R[$t,$r,non2xx]:--}" "${R[$t,$r,sockerr]:--}" \
            "${R[$t,$r,front]}" "${R[$t,$r,redis]}" "${R[$t,$r,upstream]}" "${R[$t,$r,client]}" \
            "${R[$t,$r,evalsha]}" "$dpc"
    done
done
echo "(batch, redis-benchmark, rls and ext-authz: req/s is decisions/s; p50/p99 are per call for batch and rls, per command for redis-benchmark;"
echo " non-2xx is expected on the deny targets, every request after the first a 429, and on login-outcome and"
echo " login-leave, their 401s; login-leave's req/s is its wrk clients', its CPU per attempt counts those that left too)"

echo
echo "medians over $ROUNDS round(s) (each column independently); ratio = req/s over the anchor's:"
printf '%-15s %-22s %12s %9s %9s %9s %8s %8s %9s %10s %8s\n' target process "req/s" "p50 ms" "p99 ms" \
    front-us redis-us up-us client-us redis/dec ratio
for t in "${RESULT_TARGETS[@]}"; do
    printf '%-15s %-22s %12s %9s %9s %9s %8s %8s %9s %10s %8s\n' "$t" "${FRONT_LABEL[${FRONT[$t]}]}" \
        "$(fmt_num "${MED[$t,rps]}")" "${MED[$t,p50]}" "${MED[$t,p99]}" "${MED[$t,front]}" "${MED[$t,redis]}" \
        "${MED[$t,upstream]}" "${MED[$t,client]}" "${MED[$t,redis_dec]}" "$(ratio "$t")"
done

if ((${#HEY_TARGETS[@]})); then
    echo
    echo "p99 at half of peak load (hey -z ${HALF_SECONDS}s -c $HEY_CONNS, rate = half the median peak req/s," \
        "$([[ $HALF_RATE == own ]] && echo "each target's own" || echo "the lowest of these targets'")):"
    printf '%-12s %12s %12s %10s %9s\n' target "rate asked" "req/s" "p99 ms" non-200
    for t in "${HEY_TARGETS[@]}"; do
        printf '%-12s %12s %12s %10s %9s\n' "$t" "$(awk -v q="${HALF_Q[$t]}" -v c="$HEY_CONNS" 'BEGIN { printf "%.0f", q * c }')" \
            "${HALF_RPS[$t]}" "${HALF_P99[$t]}" "${HALF_NON200[$t]}"
    done
    for t in redis-hot peer; do
        [[ -n ${HALF_P99[$t]:-} && -n ${HALF_P99[nginx]:-} ]] || continue
        awk -v a="${HALF_P99[$t]}" -v b="${HALF_P99[nginx]}" -v t="$t" \
            'BEGIN { printf "p99 at half load, %s - nginx: %+.3f ms\n", t, a - b }'
    done
fi
if ((${#PACED_TARGETS[@]})); then
    echo
    echo "p99 at half of peak load, keyed targets (wrk -t$THREADS -c$CONNS -d${HALF_SECONDS}s --latency, paced by" \
        "bench/wrk_pace.lua at half the median peak req/s, $([[ $HALF_RATE == own ]] && echo "each target's own" \
            || echo "the lowest of these targets'")):"
    printf '%-14s %12s %12s %10s %9s\n' target "rate asked" "req/s" "p99 ms" non-2xx
    for t in "${PACED_TARGETS[@]}"; do
        printf '%-14s %12s %12s %10s %9s\n' "$t" "${PACED_RATE[$t]}" "${PACED_RPS[$t]}" "${PACED_P99[$t]}" \
            "${PACED_NON2XX[$t]}"
    done
    for t in otp-body login-outcome gcra; do
        [[ -n ${PACED_P99[$t]:-} && -n ${PACED_P99[redis-keys]:-} ]] || continue
        awk -v a="${PACED_P99[$t]}" -v b="${PACED_P99[redis-keys]}" -v t="$t" \
            'BEGIN { printf "p99 at half load, %s - redis-keys: %+.3f ms\n", t, a - b }'
    done
    [[ -n ${PACED_NON2XX[login-outcome]:-} ]] && echo "(login-outcome: non-2xx are the 401s of failed logins, by design)"
fi

if [[ -n $RLS_HALF_P99 ]]; then
    echo
    echo "rls at half of its peak (bench/rls/load.rs paced at $RLS_HALF_RATE calls/s, ${HALF_SECONDS}s):" \
        "$RLS_HALF_RPS decisions/s, p99 $RLS_HALF_P99 ms"
fi

# ---------------------------------------------------------------- 9. verification
# Every allowed request must have been decided in Redis: slidegate's /metrics counts the allowed
# decisions, and where the window keeps every entry (an hour or more, limits never reached)
# Redis holds exactly one sorted-set entry per allowed decision. Elsewhere (the hot key's 10 ms
# window, gcra's one number per key) Redis keeps no count of them, and the EVALSHA calls bound
# them instead: a call carries at most one decision per open connection. Nothing here assumes
# one EVALSHA per request.
echo
echo "verification (wrk/hey counts incl. warm-ups, slidegate /metrics, Redis ZCARD and INFO commandstats):"
ok=1
FAILS=()
fail() { FAILS+=("$*"); ok=0; }
report() { # report LINE...: prints LINE, then the failures found for it
    local f
    echo "  $*"
    for f in "${FAILS[@]}"; do echo "    FAIL: $f"; done
    FAILS=()
}
# zcard_sum PATTERN: "keys entries" — the sum of ZCARD over every sorted set matching PATTERN,
# in one server-side SCAN loop (read-only; run after the load). Keys of other types under the
# same prefix (block markers, anything a later script layout adds) are skipped.
ZSUM_LUA='local c, n, s = "0", 0, 0
repeat
  local r = redis.call("SCAN", c, "MATCH", ARGV[1], "COUNT", 1000)
  c = r[1]
  for _, k in ipairs(r[2]) do
    if redis.call("TYPE", k).ok == "zset" then n = n + 1; s = s + redis.call("ZCARD", k) end
  end
until c == "0"
return {n, s}'
zcard_sum() {
    local out
    out=$(rcli eval "$ZSUM_LUA" 0 "$1" 2>&1 | tr -d '\r' | paste -sd' ' -)
    [[ $out =~ ^[0-9]+\ [0-9]+$ ]] || die "summing ZCARD over $1 in Redis failed: $out"
    echo "$out"
}
# In-flight slack: when a run ends, up to one request per connection may have been decided in
# Redis (and charged) without its answer reaching the load generator, which dropped it.
slack() { echo $((CONNS * ${TOT[$1,runs]:-0})); }

for t in "${WRK_TARGETS[@]}"; do
    completed=${TOT[$t,completed]:-0} ok2xx=${TOT[$t,ok2xx]:-0} sl=$(slack "$t")
    route=${t%-base}
    sockerr=0
    for ((r = 1; r <= ROUNDS; r++)); do sockerr=$((sockerr + ${R[$t,$r,sockerr]:-0})); done
    ((completed > 0)) || fail "$t: no completed requests"
    if [[ -n ${DENIES[$t]:-} ]]; then
        ((ok2xx <= 1)) || fail "$t: $ok2xx requests answered 2xx; the limit allows 1 per hour"
    elif [[ $route != login-outcome && $route != login-leave ]]; then # their 401s are by design, checked below
        ((ok2xx == completed)) || fail "$t: $((completed - ok2xx)) non-2xx responses"
    fi
    line="$t: $completed requests, $ok2xx 2xx, $sockerr socket errors in measured runs"
    case $route in
    peer | peer-keys)
        pat="peer-hot:*"
        [[ $t == peer-keys ]] && pat="peer-keys:*"
        read -r nkeys entries <<<"$(zcard_sum "$pat")"
        errors=$(grep -c '\[error\]' "$TMP/peer/error.log" 2>/dev/null || true)
        line+="; Redis: $nkeys key(s), $entries entries (ZCARD), $((entries - ok2xx)) charged for"
        line+=" requests cut off at the end of a run; NGINX error log: ${errors:-0} error(s)"
        ((entries >= ok2xx && entries <= ok2xx + sl)) \
            || fail "$t: Redis holds $entries entries for $ok2xx allowed requests (in-flight slack $sl)"
        ((${errors:-0} == 0)) || fail "$t: errors in the peer's NGINX error log"
        ;;
    nginx | haproxy-deny | proxy) ;;
    *) # every slidegate target with limits
        read -r allowed rejected blocked delayed shadow err_allowed err_denied hits store_errors up4xx refunds \
            <<<"$(gw_metrics "$t")"
        line+="; /metrics: allowed=$allowed rejected=$rejected (deny cache $hits) blocked=$blocked"
        line+=" delayed=$delayed store_error_allowed=$err_allowed store_error_denied=$err_denied store_errors=$store_errors"
        ((err_denied == 0)) || fail "$t: $err_denied requests denied on store errors"
        ((blocked + delayed + shadow == 0)) || fail "$t: blocked/delayed/shadow decisions on a reject route"
        # A decision slower than store.timeout fails open: a few under saturation pass with a
        # WARN, more than 0.1% of the requests fail the run.
        if ((err_allowed > 0 || store_errors > 0)); then
            if ((err_allowed * 1000 <= completed && store_errors * 1000 <= completed)); then
                line+=" (WARN: a few decisions failed open)"
            else
                fail "$t: $err_allowed requests failed open, $store_errors store errors (over 0.1%)"
            fi
        fi
        if [[ $route == deny ]]; then
            ((allowed == 1)) || fail "deny: slidegate allowed $allowed requests; the limit is 1 per hour"
            ((hits > 0)) || fail "deny: the deny cache answered no request"
        else
            ((allowed > 0)) || fail "$t: slidegate allowed no requests"
            ((rejected == 0)) || fail "$t: $rejected requests hit the (unreachable) limit"
        fi
        if [[ $route == login-outcome ]]; then
            # Every attempt is admitted (the limit is never reached); the 401s (wrk's non-2xx)
            # keep their charge, every other answer is refunded.
            failed=$((completed - ok2xx))
            line+="; $failed answered 401 (upstream 4xx in /metrics: $up4xx), $refunds refunded"
            ((allowed + err_allowed >= completed && allowed <= completed + sl)) \
                || fail "$t: /metrics allowed=$allowed does not match $completed attempts (in-flight slack $sl)"
            ((up4xx >= failed && up4xx <= failed + sl)) \
                || fail "$t: the upstream answered $up4xx 4xx, the clients saw $failed non-2xx (slack $sl)"
            ((refunds + up4xx + sl >= allowed && refunds + up4xx <= allowed + sl)) \
                || fail "$t: $refunds refunds and $up4xx failures for $allowed admitted attempts (slack $sl)"
            awk -v f="$failed" -v n="$completed" -v s="$FAIL_SHARE" 'BEGIN { exit !(n < 1000 || (f / n > s - 0.05 && f / n < s + 0.05)) }' \
                || fail "$t: $failed of $completed attempts failed; BENCH_LOGIN_FAIL_SHARE is $FAIL_SHARE"
        elif [[ $route == login-leave ]]; then
            # wrk's attempts and the leavers' (each left before its answer, the upstream's 401
            # coming after it: counted once the attempt went upstream, refunded when it had not).
            left=${TOT[$t,left]:-0}
            line+="; $left attempts left before their answer (${TOT[$t,left_first]:-0} answered first)"
            line+=", $refunds refunded"
            ((allowed + err_allowed + sl >= completed + left && allowed <= completed + left + sl)) \
                || fail "$t: /metrics allowed=$allowed does not match $completed + $left attempts (slack $sl)"
        elif [[ $route != deny ]]; then
            ((allowed + err_allowed >= ok2xx && allowed <= ok2xx + sl)) \
                || fail "$t: /metrics allowed=$allowed does not match $ok2xx 2xx answers (in-flight slack $sl)"
        fi
        [[ -n ${USES_REDIS[$t]:-} ]] || { report "$line"; continue; }
        if [[ $route == login-leave ]]; then
            # Every admitted attempt is counted (an entry in Redis) or refunded, never neither.
            read -r nkeys entries <<<"$(zcard_sum "sgb-$t:*")"
            line+="; Redis: $nkeys key(s), $entries entries + $refunds refunds = $((entries + refunds))"
            line+=" for $allowed admitted"
            ((entries + refunds >= allowed && entries + refunds <= allowed + err_allowed)) \
                || fail "$t: $entries entries + $refunds refunds for $allowed admitted attempts (fail-open slack $err_allowed)"
        elif [[ -n ${ZSET_EXACT[$t]:-} || $route == login-outcome ]]; then
            read -r nkeys entries <<<"$(zcard_sum "sgb-$t:*")"
            line+="; Redis: $nkeys key(s), $entries entries (ZCARD)"
            kept=$allowed
            [[ $route == login-outcome ]] && kept=$up4xx # the charges not refunded
            # Every kept charge left one entry. More entries than that: decisions whose request
            # was dropped while Redis answered (the load generator stopping), or that ran in Redis
            # after slidegate had given up on them (store.timeout, fail-open).
            ((entries > kept)) && line+=", $((entries - kept)) charged for requests cut off or failed open"
            ((entries + sl >= kept && entries <= kept + err_allowed + sl)) \
                || fail "$t: Redis holds $entries entries for $kept kept charges (slack $((err_allowed + sl)))"
        fi
        # A call carries at most one decision per open connection: Redis's EVALSHA calls bound
        # the decisions slidegate says it made in Redis (a gateway that skipped Redis fails it).
        for ((r = 1; r <= ROUNDS; r++)); do
            dec=${R[$t,$r,decisions]:-0} calls=${R[$t,$r,evalsha]:-0}
            ((dec <= calls * CONNS)) \
                || fail "$t round $r: $dec decisions in Redis but only $calls EVALSHA calls for $CONNS connections"
        done
        ;;
    esac
    report "$line"
done
if wants batch; then
    # One sorted set per key holds the entries of both limits (day and week): one per decision.
    read -r nkeys entries <<<"$(zcard_sum "sgb-batch:*")"
    allowed=${TOT[batch,allowed]:-0} denied=${TOT[batch,denied]:-0} errors=${TOT[batch,errors]:-0}
    ((allowed > 0)) || fail "batch: no decision allowed"
    ((denied == 0 && errors == 0)) || fail "batch: denied or failed decisions under a limit never reached"
    # The client waits for every call, so the counts must match exactly.
    ((entries == allowed)) || fail "batch: Redis holds $entries entries for $allowed allowed decisions"
    report "batch: $allowed decisions allowed, $denied denied, $errors with a store error; Redis: $nkeys keys" \
        "(one sorted set per key for both limits), ZCARD $entries"
    rb_failed=0
    for ((r = 1; r <= ROUNDS; r++)); do rb_failed=$((rb_failed + ${R[redis-benchmark,$r,evalsha_failed]:-0})); done
    ((rb_failed == 0)) || fail "redis-benchmark: EVALSHA calls failed"
    report "redis-benchmark: $rb_failed failed EVALSHA calls in the measured runs"
fi
if wants rls; then
    # One sorted set per key; the load generator waits for every call: one entry per allowed
    # decision, exactly.
    read -r nkeys entries <<<"$(zcard_sum "sgb-rls:*")"
    allowed=${TOT[rls,allowed]:-0} denied=${TOT[rls,denied]:-0} errors=${TOT[rls,errors]:-0}
    ((allowed > 0)) || fail "rls: no decision allowed"
    ((denied == 0 && errors == 0)) || fail "rls: $denied refused and $errors failed calls under a limit never reached"
    ((entries == allowed)) || fail "rls: Redis holds $entries entries for $allowed allowed decisions"
    report "rls: $allowed decisions allowed, $denied refused, $errors failed calls; Redis: $nkeys keys, ZCARD $entries"
fi
if wants ext-authz; then
    # As rls: one entry per allowed Check (every call has a stream id of its own, so none is
    # answered from another's decision).
    read -r nkeys entries <<<"$(zcard_sum "sgb-ext-authz:*")"
    allowed=${TOT[ext-authz,allowed]:-0} denied=${TOT[ext-authz,denied]:-0} errors=${TOT[ext-authz,errors]:-0}
    ((allowed > 0)) || fail "ext-authz: no Check allowed"
    ((denied == 0 && errors == 0)) || fail "ext-authz: $denied refused and $errors failed calls under a limit never reached"
    ((entries == allowed)) || fail "ext-authz: Redis holds $entries entries for $allowed allowed decisions"
    report "ext-authz: $allowed Checks allowed, $denied refused, $errors failed calls; Redis: $nkeys keys, ZCARD $entries"
fi
# EVALSHA calls per target (measured runs): how many decisions each call carried.
echo "  EVALSHA in the measured runs (INFO commandstats):"
printf '    %-15s %10s %12s %14s %18s\n' target calls decisions decisions/call "Redis us/decision"
for t in "${RESULT_TARGETS[@]}"; do
    [[ -n ${USES_REDIS[$t]:-} ]] || continue
    calls=0 decs=0
    for ((r = 1; r <= ROUNDS; r++)); do
        calls=$((calls + ${R[$t,$r,evalsha]:-0})) decs=$((decs + ${R[$t,$r,decisions]:-0}))
    done
    awk -v t="$t" -v c="$calls" -v d="$decs" -v u="${MED[$t,redis_dec]}" \
        'BEGIN { printf "    %-15s %10d %12d %14s %18s\n", t, c, d, (c > 0 ? sprintf("%.2f", d / c) : "-"), u }'
done
if ((!ok)); then
    echo "VERIFICATION FAILED: the figures above are not valid"
    exit 1
fi
echo "  OK: every allowed decision was made in Redis, every target answered as configured"

# ---------------------------------------------------------------- 10. goals
echo
echo "goals (PASS/MISS; a MISS does not fail the run):"
# goal LABEL VALUE OP BOUND DETAIL: VALUE and BOUND numbers, OP ge|le.
goal() {
    local label=$1 value=$2 op=$3 bound=$4 detail=$5
    if [[ $value == - || $bound == - || -z $value || -z $bound ]]; then
        printf '  SKIP  %-48s (%s)\n' "$label" "not measured"
        return
    fi
    if awk -v v="$value" -v b="$bound" -v op="$op" 'BEGIN { exit !((op == "ge" && v >= b) || (op == "le" && v <= b)) }'; then
        printf '  PASS  %-48s %s\n' "$label" "$detail"
    else
        printf '  MISS  %-48s %s\n' "$label" "$detail"
    fi
}
rate_ratio() { # rate_ratio A B: A's median rate over B's, or "-"
    [[ ${MED[$1,rps]:--} != - && ${MED[$2,rps]:--} != - ]] || { echo "-"; return; }
    awk -v x="${MED[$1,rps]}" -v y="${MED[$2,rps]}" 'BEGIN { if (y > 0) printf "%.3f", x / y; else print "-" }'
}
rate_goal() { # rate_goal TARGET ANCHOR MIN
    local q
    q=$(rate_ratio "$1" "$2")
    goal "$1 >= ${3}x $2 (req/s)" "$q" ge "$3" "$q x ($(fmt_num "${MED[$1,rps]:--}") vs $(fmt_num "${MED[$2,rps]:--}"))"
}
rate_goal redis-hot peer 2.0
rate_goal redis-keys peer-keys 1.8
for t in redis-hot redis-keys; do
    g=${MED[$t,front]:--} n=${MED[nginx,front]:--}
    bound=$(awk -v n="$n" 'BEGIN { if (n == "-") print "-"; else printf "%.3f", n * 1.3 }')
    goal "$t gateway CPU/req <= 1.3x nginx's" "$g" le "$bound" "$g us vs nginx $n us (bound $bound us, Redis excluded)"
done
goal "redis-hot Redis CPU/decision <= 5 us" "${MED[redis-hot,redis_dec]:--}" le 5 "${MED[redis-hot,redis_dec]:--} us"
goal "redis-keys Redis CPU/decision <= 9 us" "${MED[redis-keys,redis_dec]:--}" le 9 "${MED[redis-keys,redis_dec]:--} us"
rate_goal proxy nginx 0.9
rate_goal memory nginx 0.85
rate_goal deny haproxy-deny 0.9
q=$(rate_ratio batch redis-benchmark)
goal "batch >= 1.0x redis-benchmark (decisions/s)" "$q" ge 1.0 \
    "$q x ($(fmt_num "${MED[batch,rps]:--}") vs $(fmt_num "${MED[redis-benchmark,rps]:--}") decisions/s)"
if [[ -n ${HALF_P99[redis-hot]:-} && -n ${HALF_P99[nginx]:-} ]]; then
    bound=$(awk -v n="${HALF_P99[nginx]}" 'BEGIN { printf "%.3f", n + 1 }')
    goal "redis-hot p99 at half load <= nginx p99 + 1 ms" "${HALF_P99[redis-hot]}" le "$bound" \
        "${HALF_P99[redis-hot]} ms vs nginx ${HALF_P99[nginx]} ms"
else
    goal "redis-hot p99 at half load <= nginx p99 + 1 ms" - le - ""
fi
rate_goal otp-body redis-keys 0.9
rate_goal login-outcome redis-keys 0.8
q=$(rate_ratio login-leave redis-keys)
[[ $q == - ]] || printf '  INFO  %-48s %s\n' "login-leave / redis-keys (req/s of wrk's clients), no goal" \
    "$q x ($(fmt_num "${MED[login-leave,rps]:--}") vs $(fmt_num "${MED[redis-keys,rps]:--}"); plus ${TOT[login-leave,left]:-0} attempts that left, all runs)"
q=$(rate_ratio redis-keys-acks redis-keys)
[[ $q == - ]] || printf '  INFO  %-48s %s\n' "redis-keys-acks / redis-keys (req/s), no goal" \
    "$q x ($(fmt_num "${MED[redis-keys-acks,rps]:--}") vs $(fmt_num "${MED[redis-keys,rps]:--}"))"
q=$(rate_ratio gcra redis-keys)
[[ $q == - ]] || printf '  INFO  %-48s %s\n' "gcra / redis-keys (req/s), no goal" \
    "$q x ($(fmt_num "${MED[gcra,rps]:--}") vs $(fmt_num "${MED[redis-keys,rps]:--}"))"
rate_goal rls redis-keys 1.5
rate_goal ext-authz otp-body 1.3
if [[ ${MED[ext-authz,redis]:--} != - && ${MED[otp-body,redis]:--} != - ]]; then
    bound=$(awk -v o="${MED[otp-body,redis]}" 'BEGIN { printf "%.1f", o * 1.1 }')
    goal "ext-authz Redis CPU per decision <= 1.1x otp-body's" "${MED[ext-authz,redis]}" le "$bound" \
        "${MED[ext-authz,redis]} us vs otp-body ${MED[otp-body,redis]} us"
fi
goal "rls p99 at half load < 5 ms" "${RLS_HALF_P99:--}" le 5 "${RLS_HALF_P99:--} ms at ${RLS_HALF_RPS:--} decisions/s"
if [[ -n ${PACED_P99[otp-body]:-} && -n ${PACED_P99[redis-keys]:-} ]]; then
    printf '  INFO  %-48s %s\n' "otp-body p99 at half load, no goal" \
        "${PACED_P99[otp-body]} ms vs redis-keys ${PACED_P99[redis-keys]} ms"
fi
# A/B: this build against BENCH_BASELINE_BIN, the same config, in the same rounds.
if [[ -n $BASELINE_BIN ]]; then
    for t in "${AB_TARGETS[@]}"; do
        wants "$t" || continue
        q=$(rate_ratio "$t" "$t-base")
        cpu=$(awk -v a="${MED[$t,front]:--}" -v b="${MED[$t-base,front]:--}" \
            'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2fx", a / b }')
        goal "A/B $t new >= 0.97x old (req/s)" "$q" ge 0.97 \
            "$q x ($(fmt_num "${MED[$t,rps]:--}") vs $(fmt_num "${MED[$t-base,rps]:--}"); gateway CPU/req new/old $cpu)"
    done
fi

# ---------------------------------------------------------------- 11. Markdown
echo
echo "Markdown (medians of $ROUNDS round(s), wrk -t$THREADS -c$CONNS -d${SECONDS_PER_RUN}s; CPU in µs per request," \
    "per decision for batch and redis-benchmark):"
echo
echo "| target | process | req/s | p50 ms | p99 ms | proxy CPU µs | Redis CPU µs | upstream CPU µs | client CPU µs | ratio |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
for t in "${RESULT_TARGETS[@]}"; do
    a=${ANCHOR[$t]:-}
    rq=$(ratio "$t")
    [[ $rq != - ]] && rq="$rq $a"
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$t" "${FRONT_LABEL[${FRONT[$t]}]}" \
        "$(fmt_num "${MED[$t,rps]}")" "${MED[$t,p50]}" "${MED[$t,p99]}" "${MED[$t,front]}" "${MED[$t,redis]}" \
        "${MED[$t,upstream]}" "${MED[$t,client]}" "$rq"
done
if [[ -n $BASELINE_BIN ]]; then
    echo
    echo "| A/B (baseline: the -base rows) | new req/s | old req/s | new/old | gateway CPU µs new | old |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: |"
    for t in "${AB_TARGETS[@]}"; do
        wants "$t" || continue
        printf '| %s | %s | %s | %s | %s | %s |\n' "$t" "$(fmt_num "${MED[$t,rps]}")" "$(fmt_num "${MED[$t-base,rps]}")" \
            "$(rate_ratio "$t" "$t-base")" "${MED[$t,front]}" "${MED[$t-base,front]}"
    done
fi
if ((${#PACED_TARGETS[@]})); then
    echo
    echo "| p99 at half load (paced wrk) | rate | p99 ms |"
    echo "| --- | ---: | ---: |"
    for t in "${PACED_TARGETS[@]}"; do
        printf '| %s | %s req/s | %s |\n' "$t" "$(fmt_num "${PACED_RPS[$t]}")" "${PACED_P99[$t]}"
    done
fi
if ((${#HEY_TARGETS[@]})); then
    echo
    echo "| p99 at half load | rate | p99 ms |"
    echo "| --- | ---: | ---: |"
    for t in "${HEY_TARGETS[@]}"; do
        printf '| %s | %s req/s | %s |\n' "$t" "$(fmt_num "${HALF_RPS[$t]}")" "${HALF_P99[$t]}"
    done
fi

echo
echo "total time: $(($(date +%s) - START_TIME)) s (build included)"

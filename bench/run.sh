#!/usr/bin/env bash
# bench/run.sh — throughput/latency of slidegate vs. a plain NGINX reverse proxy.
#
# One invocation, on loopback only:
#   1. installs nginx (nginx-light) and wrk with apt-get if they are missing;
#   2. builds the release binaries (cargo build --release --bins);
#   3. starts a private redis-server, the demo upstream, slidegate (one `/*` route with a
#      sliding_log limit so high that nothing is ever rejected, so every request costs one
#      EVALSHA in Redis) and NGINX (keepalive pool to the same upstream), all on free ports;
#   4. loads both with identical wrk settings, alternating sides (ABBA order) over
#      BENCH_ROUNDS rounds, each measured run preceded by a short warm-up;
#   5. prints per-round results, the per-side MEDIAN of req/s, p50 and p99, and the
#      gateway/nginx ratios, then checks slidegate's /metrics and Redis's command stats to
#      prove the decisions really were made in Redis (exit 1 if not).
# Every process it starts is stopped on exit, including on failure or Ctrl-C.
#
# Knobs (environment): BENCH_SECONDS (10), BENCH_WARMUP (2), BENCH_ROUNDS (2),
#   BENCH_THREADS (2), BENCH_CONNS (64), BENCH_PATH (/bench).
# Usage: bench/run.sh            (from any directory; needs root only to install packages)

set -euo pipefail
export LC_ALL=C # wrk output and printf use "." decimals

SECONDS_PER_RUN=${BENCH_SECONDS:-10}
WARMUP=${BENCH_WARMUP:-2}
ROUNDS=${BENCH_ROUNDS:-2}
THREADS=${BENCH_THREADS:-2}
CONNS=${BENCH_CONNS:-64}
URL_PATH=${BENCH_PATH:-/bench}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

log() { printf '[bench] %s\n' "$*" >&2; }
die() { printf '[bench] ERROR: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- cleanup
TMP=""
PIDS=()  # background services
CHILD="" # the current long-running step (cargo, wrk), see run_fg
exec 9>&2 # the real stderr, for cleanup messages even if a signal lands inside a redirection
cleanup() {
    local rc=$? pid i
    trap - EXIT INT TERM
    exec 2>&9
    # Stop front to back: the running wrk/cargo, then nginx, slidegate, upstream, redis.
    local order=() interrupted=0
    ((rc == 130 || rc == 143)) && interrupted=1 && log "interrupted, stopping everything"
    [[ -n $CHILD ]] && order+=("$CHILD")
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
need_install=()
command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || need_install+=(nginx-light)
command -v wrk >/dev/null 2>&1 || need_install+=(wrk)
if ((${#need_install[@]})); then
    log "installing ${need_install[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    timeout 600 apt-get update -q >/dev/null || die "apt-get update failed"
    timeout 900 apt-get install -y -q --no-install-recommends "${need_install[@]}" >/dev/null \
        || die "apt-get install ${need_install[*]} failed"
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
for tool in "$NGINX" wrk redis-server curl timeout; do
    command -v "$tool" >/dev/null 2>&1 || die "missing required tool: $tool"
done

# ---------------------------------------------------------------- 2. build
log "building release binaries (cargo build --release --bins)"
run_fg timeout 1800 cargo build --release --bins --quiet || die "cargo build failed"
GATEWAY_BIN=$ROOT/target/release/slidegate
UPSTREAM_BIN=$ROOT/target/release/demo-upstream
[[ -x $GATEWAY_BIN && -x $UPSTREAM_BIN ]] || die "release binaries not found under target/release"

TMP=$(mktemp -d -t slidegate-bench.XXXXXX)
chmod 755 "$TMP" # nginx workers drop root privileges and must reach their temp paths

# ---------------------------------------------------------------- 3. ports
# A port is free when nothing accepts a connection on it (pure bash, no python needed).
# Candidates lie outside the kernel's ephemeral range (below it, else above it): outgoing
# connections (wrk, curl, the Redis client) may hold any ephemeral port, failing a later bind.
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
# free_port runs in a subshell, so the caller records each pick in TAKEN.
REDIS_PORT=$(free_port)
TAKEN+="$REDIS_PORT "
UP_PORT=$(free_port)
TAKEN+="$UP_PORT "
GW_PORT=$(free_port)
TAKEN+="$GW_PORT "
ADMIN_PORT=$(free_port)
TAKEN+="$ADMIN_PORT "
NGINX_PORT=$(free_port)

# ---------------------------------------------------------------- 4. services
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

log "starting redis-server on 127.0.0.1:$REDIS_PORT"
start redis redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --daemonize no --dir "$TMP"
for ((i = 0; ; i++)); do
    ((i < 150)) || die "redis-server did not answer within 30s"
    kill -0 "${PIDS[-1]}" 2>/dev/null || die "redis-server exited during startup"
    [[ $(timeout 2 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]] && break
    sleep 0.2
done

log "starting demo-upstream on 127.0.0.1:$UP_PORT"
start upstream "$UPSTREAM_BIN" "127.0.0.1:$UP_PORT"
wait_http demo-upstream "http://127.0.0.1:$UP_PORT/"

cat >"$TMP/slidegate.toml" <<EOF
# Generated by bench/run.sh: one catch-all route whose limit is never reached, so every
# request is decided in Redis (one EVALSHA of the sliding-log script) and then proxied.
[server]
listen = "127.0.0.1:$GW_PORT"

[admin]
listen = "127.0.0.1:$ADMIN_PORT"

[store]
backend = "redis"
url = "redis://127.0.0.1:$REDIS_PORT"
key_prefix = "slidegate-bench"

[upstreams.demo]
url = "http://127.0.0.1:$UP_PORT"

[[routes]]
name = "bench"
path = "/*"
upstream = "demo"
key = ["route"]

  [[routes.limits]]
  name = "never"
  limit = 100000000
  window = "1m"
  algorithm = "sliding_log"
EOF
"$GATEWAY_BIN" check --config "$TMP/slidegate.toml" >"$TMP/check.out" 2>&1 \
    || { cat "$TMP/check.out" >&2; die "generated slidegate config is invalid"; }

log "starting slidegate on 127.0.0.1:$GW_PORT (admin 127.0.0.1:$ADMIN_PORT)"
start slidegate env -u SLIDEGATE_REDIS_URL -u SLIDEGATE_CONFIG SLIDEGATE_LOG=warn \
    "$GATEWAY_BIN" --config "$TMP/slidegate.toml"
wait_http slidegate-admin "http://127.0.0.1:$ADMIN_PORT/readyz"
wait_http slidegate "http://127.0.0.1:$GW_PORT$URL_PATH"

mkdir -p "$TMP/nginx"
cat >"$TMP/nginx/nginx.conf" <<EOF
# Generated by bench/run.sh: a minimal keepalive reverse proxy to the same demo upstream.
daemon off;
master_process on;
worker_processes auto;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx.log warn;

events {
    worker_connections 4096;
}

http {
    access_log off;
    client_body_temp_path $TMP/nginx/client_body;
    proxy_temp_path $TMP/nginx/proxy;
    fastcgi_temp_path $TMP/nginx/fastcgi;
    uwsgi_temp_path $TMP/nginx/uwsgi;
    scgi_temp_path $TMP/nginx/scgi;

    upstream demo {
        server 127.0.0.1:$UP_PORT;
        keepalive 64;
    }

    server {
        listen 127.0.0.1:$NGINX_PORT;
        location / {
            proxy_pass http://demo;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            # slidegate sets these too, so both sides send the upstream the same work.
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto \$scheme;
        }
    }
}
EOF
"$NGINX" -t -q -p "$TMP/nginx" -e "$TMP/nginx.log" -c "$TMP/nginx/nginx.conf" 2>"$TMP/nginx-t.out" \
    || { cat "$TMP/nginx-t.out" >&2; die "generated nginx config is invalid"; }
log "starting nginx on 127.0.0.1:$NGINX_PORT"
start nginx-stdout "$NGINX" -p "$TMP/nginx" -e "$TMP/nginx.log" -c "$TMP/nginx/nginx.conf"
wait_http nginx "http://127.0.0.1:$NGINX_PORT$URL_PATH"

# ---------------------------------------------------------------- 5. load
# run_wrk SIDE ROUND: a warm-up, then the measured run saved to $TMP/wrk-SIDE-ROUND.txt.
declare -A PORT=([nginx]=$NGINX_PORT [gateway]=$GW_PORT)
run_wrk() {
    local side=$1 round=$2 url="http://127.0.0.1:${PORT[$1]}$URL_PATH"
    if ((WARMUP > 0)); then
        run_fg timeout $((WARMUP + 30)) wrk -t"$THREADS" -c"$CONNS" -d"${WARMUP}s" "$url" \
            >"$TMP/warmup-$side-$round.txt" 2>&1 || die "wrk warm-up against $side failed"
    fi
    run_fg timeout $((SECONDS_PER_RUN + 30)) wrk -t"$THREADS" -c"$CONNS" -d"${SECONDS_PER_RUN}s" --latency "$url" \
        >"$TMP/wrk-$side-$round.txt" 2>&1 || { cat "$TMP/wrk-$side-$round.txt" >&2; die "wrk against $side failed"; }
}

log "load: wrk -t$THREADS -c$CONNS -d${SECONDS_PER_RUN}s --latency (warm-up ${WARMUP}s), $ROUNDS round(s) per side"
for ((r = 1; r <= ROUNDS; r++)); do
    # ABBA order: odd rounds nginx first, even rounds gateway first, so drift cancels out.
    if ((r % 2)); then order=(nginx gateway); else order=(gateway nginx); fi
    for side in "${order[@]}"; do
        log "round $r/$ROUNDS: $side"
        run_wrk "$side" "$r"
    done
done

# ---------------------------------------------------------------- 6. parse
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

median() { # median of the numbers given as arguments (mean of the middle two when even)
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
        if (NR % 2) printf "%.3f", v[(NR + 1) / 2]; else printf "%.3f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

declare -A RPS P50 P99 NON2XX SOCKERR MED_RPS MED_P50 MED_P99
for side in nginx gateway; do
    RPS[$side]="" P50[$side]="" P99[$side]="" NON2XX[$side]=0 SOCKERR[$side]=0
done

echo
echo "slidegate vs NGINX — wrk -t$THREADS -c$CONNS -d${SECONDS_PER_RUN}s --latency http://127.0.0.1:PORT$URL_PATH"
echo "machine: $(nproc) CPU(s); wrk, proxy, demo upstream and redis share them"
echo
printf '%-6s %-8s %12s %10s %10s %9s %9s\n' round side "req/s" "p50 ms" "p99 ms" non-2xx sock-err
for ((r = 1; r <= ROUNDS; r++)); do
    for side in nginx gateway; do
        read -r rps p50 p99 non2xx errs _ < <(wrk_field "$TMP/wrk-$side-$r.txt") \
            || die "could not parse wrk output for $side round $r"
        printf '%-6s %-8s %12.0f %10.3f %10.3f %9d %9d\n' "$r" "$side" "$rps" "$p50" "$p99" "$non2xx" "$errs"
        RPS[$side]+=" $rps" P50[$side]+=" $p50" P99[$side]+=" $p99"
        NON2XX[$side]=$((NON2XX[$side] + non2xx)) SOCKERR[$side]=$((SOCKERR[$side] + errs))
    done
done

echo
echo "median over $ROUNDS round(s) per side (each column independently):"
printf '%-8s %12s %10s %10s %9s %9s\n' side "req/s" "p50 ms" "p99 ms" non-2xx sock-err
for side in nginx gateway; do
    # shellcheck disable=SC2086  # word splitting of the per-round lists is intended
    MED_RPS[$side]=$(median ${RPS[$side]})
    MED_P50[$side]=$(median ${P50[$side]})
    MED_P99[$side]=$(median ${P99[$side]})
    printf '%-8s %12.0f %10.3f %10.3f %9d %9d\n' "$side" "${MED_RPS[$side]}" "${MED_P50[$side]}" \
        "${MED_P99[$side]}" "${NON2XX[$side]}" "${SOCKERR[$side]}"
done
echo
awk -v gr="${MED_RPS[gateway]}" -v nr="${MED_RPS[nginx]}" -v g50="${MED_P50[gateway]}" \
    -v n50="${MED_P50[nginx]}" -v g99="${MED_P99[gateway]}" -v n99="${MED_P99[nginx]}" 'BEGIN {
        printf "ratio gateway/nginx: %.2fx req/s, %.2fx p50, %.2fx p99\n",
            (nr > 0 ? gr / nr : 0), (n50 > 0 ? g50 / n50 : 0), (n99 > 0 ? g99 / n99 : 0) }'

# ---------------------------------------------------------------- verify
# The gateway must have decided the requests in Redis: allowed > 0; nothing rejected, blocked
# or delayed (the limit is never reached); Redis must have run the EVALSHAs. A request whose
# decision exceeds store.timeout (50ms default) fails open (store_error_allowed): a few under
# saturation are tolerated with a WARN, more than 0.1% of the gateway's requests fail the run.
metrics=$(curl -fsS --max-time 5 "http://127.0.0.1:$ADMIN_PORT/metrics") || die "cannot read slidegate /metrics"
decision_count() {
    awk -v d="decision=\"$1\"" 'index($0, "slidegate_requests_total{") == 1 && index($0, d) { s += $NF }
        END { printf "%d", s }' <<<"$metrics"
}
declare -A DEC
others=""
for d in allowed rejected blocked delayed shadow_rejected store_error_allowed store_error_denied; do
    DEC[$d]=$(decision_count "$d")
    [[ $d == allowed ]] || others+=" $d=${DEC[$d]}"
done
allowed=${DEC[allowed]}
limited=$((DEC[rejected] + DEC[blocked] + DEC[delayed] + DEC[shadow_rejected]))
fail_open=${DEC[store_error_allowed]}
store_errors=$(awk 'index($0, "slidegate_store_errors_total{") == 1 { s += $NF } END { printf "%d", s }' <<<"$metrics")
# cmdstat_evalsha:calls=N,usec=T,usec_per_call=U,...
read -r evalsha evalsha_us < <(timeout 5 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" info commandstats 2>/dev/null \
    | tr -d '\r' | awk -F'[:=,]' '$1 == "cmdstat_evalsha" { print $3, $7 }') || true
evalsha=${evalsha:-0} evalsha_us=${evalsha_us:-?}
wrk_done=0
for f in "$TMP"/wrk-gateway-*.txt "$TMP"/warmup-gateway-*.txt; do
    [[ -e $f ]] || continue
    n=$(awk '/ requests in / { print $1 }' "$f")
    wrk_done=$((wrk_done + ${n:-0}))
done

echo
echo "verification (slidegate admin /metrics and redis INFO commandstats):"
echo "  slidegate_requests_total allowed=$allowed;$others"
echo "  slidegate_store_errors_total=$store_errors; redis EVALSHA calls=$evalsha" \
    "(${evalsha_us} us each inside Redis); wrk completed against the gateway (incl. warm-ups)=$wrk_done"
echo "  wrk non-2xx responses: nginx=${NON2XX[nginx]} gateway=${NON2XX[gateway]};" \
    "socket errors: nginx=${SOCKERR[nginx]} gateway=${SOCKERR[gateway]}"
ok=1 warn=""
((allowed > 0)) || { echo "  FAIL: slidegate allowed no requests"; ok=0; }
((limited == 0)) || { echo "  FAIL: $limited requests hit the (unreachable) limit"; ok=0; }
((DEC[store_error_denied] == 0)) || { echo "  FAIL: ${DEC[store_error_denied]} requests denied on store errors"; ok=0; }
if ((fail_open > 0 || store_errors > 0)); then
    # Tolerance: at most 0.1% of the gateway's requests not decided in Redis.
    if ((fail_open * 1000 <= allowed + fail_open && store_errors * 1000 <= allowed + fail_open)); then
        warn="; WARN: $fail_open request(s) failed open after a store error (see slidegate_store_errors_total)"
    else
        echo "  FAIL: $fail_open requests failed open, $store_errors store errors (over 0.1%)"
        ok=0
    fi
fi
((evalsha >= wrk_done - fail_open)) || { echo "  FAIL: fewer EVALSHA calls ($evalsha) than gateway requests ($wrk_done)"; ok=0; }
((NON2XX[gateway] == 0 && NON2XX[nginx] == 0)) || { echo "  FAIL: non-2xx responses during the load"; ok=0; }
if ((ok)); then
    echo "  OK: $allowed gateway requests decided in Redis and allowed$warn"
else
    exit 1
fi

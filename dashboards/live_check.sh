#!/usr/bin/env bash
# Live check of the dashboard's and the alert rules' queries against a real Prometheus.
#
#   dashboards/live_check.sh [DASHBOARD.json] [RULES.yml]
#       (defaults: dashboards/slidegate.json and deploy/alerts.yml)
#
# dashboards/check.sh proves that every query names real metrics, labels and values; this proves
# that Prometheus runs them and that the Abuse row shows something when there is abuse. It
# starts, on free loopback ports:
#   - slidegate with the memory store (store.max_keys small enough to fill) and routes that move
#     every metric: a blocking login route that counts 401/403 and resets on 200 (json:username
#     key), an OTP route keyed on json:phone (normalised, hashed), a route whose upstream
#     refuses connections (502s, counted with count_status = ["5xx"]), delay, shadow, exempt
#     and deny-cache routes, and three routes keyed on a query parameter to fill the store
#     (on_error allow, deny and local); and Envoy's rate-limit service ([rls]), called over
#     gRPC by bench/rls/load.rs;
#   - the demo upstream (src/bin/demo-upstream.rs), which answers 200 to everything, and a small
#     python3 http.server upstream for what it cannot answer: 401/200 logins, 400, 302, 404, 500;
#   - a real `prometheus` server scraping slidegate every second and loading the alert rules.
# It waits for a baseline scrape, drives traffic with curl, waits for the scrapes after it,
# then runs every dashboard target (Grafana's variables substituted: $instance and $route ->
# .*, $__rate_interval -> 1m, $__interval -> 15s, $__range -> 5m) and every alert rule's expr
# through /api/v1/query, resolves the template variables through /api/v1/label, and reads
# /api/v1/rules for rule evaluation errors. It fails on any query error, on an unknown Grafana
# variable, and on an Abuse-row query that returns no series or only zeros (the traffic made
# every one of them non-zero). Every process it starts is stopped on exit.
#
# Environment:
#   SLIDEGATE_BIN, DEMO_UPSTREAM_BIN,  binaries to use (default: cargo build --bin slidegate
#   RLS_LOAD_BIN                       --bin demo-upstream --example rls_load, then
#                                      target/debug/; rls_load is bench/rls/load.rs)
#   PROMETHEUS_BIN                     the Prometheus server (default: prometheus on PATH; the
#                                      Debian/Ubuntu package `prometheus` ships it with promtool)
#   LIVE_CHECK_KEEP=1                  keep the work directory (configs, logs, TSDB) for a look
#
# Needs bash, curl and python3. Exit 0 when everything passes, 1 on a failure, 77 when there is
# no Prometheus server binary to run (nothing was checked).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
dashboard="$(realpath "${1:-$here/slidegate.json}")"
rules="$(realpath "${2:-$root/deploy/alerts.yml}")"
started=$SECONDS

say() { printf 'live_check: %s\n' "$*"; }
die() { printf 'live_check: FAIL: %s\n' "$*" >&2; exit 1; }

prometheus_bin="${PROMETHEUS_BIN:-prometheus}"
if ! command -v "$prometheus_bin" >/dev/null 2>&1; then
    cat >&2 <<TXT
live_check: SKIP: no Prometheus server binary ('$prometheus_bin' is not on PATH).
  promtool alone cannot run queries against live data; the live check needs the server.
  On Debian or Ubuntu: apt-get install prometheus (the package ships both /usr/bin/prometheus
  and /usr/bin/promtool). Where promtool came from elsewhere (a tarball, another package),
  install the server next to it, or point PROMETHEUS_BIN at one.
TXT
    exit 77
fi
for tool in curl python3; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is required"
done
[[ -f $dashboard ]] || die "no such dashboard: $dashboard"
[[ -f $rules ]] || die "no such rule file: $rules"

if [[ -z ${SLIDEGATE_BIN:-} || -z ${DEMO_UPSTREAM_BIN:-} ]]; then
    say "cargo build --bin slidegate --bin demo-upstream --example rls_load"
    (cd "$root" && cargo build --quiet --bin slidegate --bin demo-upstream --example rls_load)
    target_dir="${CARGO_TARGET_DIR:-$root/target}"
    SLIDEGATE_BIN="${SLIDEGATE_BIN:-$target_dir/debug/slidegate}"
    DEMO_UPSTREAM_BIN="${DEMO_UPSTREAM_BIN:-$target_dir/debug/demo-upstream}"
    RLS_LOAD_BIN="${RLS_LOAD_BIN:-$target_dir/debug/examples/rls_load}"
fi
if [[ -z ${RLS_LOAD_BIN:-} ]]; then
    (cd "$root" && cargo build --quiet --example rls_load)
    RLS_LOAD_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/examples/rls_load"
fi
[[ -x $SLIDEGATE_BIN ]] || die "not an executable: $SLIDEGATE_BIN"
[[ -x $DEMO_UPSTREAM_BIN ]] || die "not an executable: $DEMO_UPSTREAM_BIN"
[[ -x $RLS_LOAD_BIN ]] || die "not an executable: $RLS_LOAD_BIN"
built_at=$SECONDS

work="$(mktemp -d "${TMPDIR:-/tmp}/slidegate-live.XXXXXX")"
pids=()
cleanup() {
    local status=$? p
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    # Bounded: whatever has not exited after 5 s is killed.
    for _ in $(seq 50); do
        local alive=0
        for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        ((alive)) || break
        sleep 0.1
    done
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if ((status != 0)); then
        for log in slidegate upstream demo-upstream prometheus; do
            [[ -s $work/$log.log ]] || continue
            echo "---- last lines of $log.log ----" >&2
            tail -n 15 "$work/$log.log" >&2
        done
    fi
    if [[ ${LIVE_CHECK_KEEP:-} == 1 ]]; then
        echo "live_check: work directory kept: $work" >&2
    else
        rm -rf "$work"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Seven distinct free loopback ports, held at once while picked. The last one is never listened
# on: the route whose upstream refuses connections points there.
read -r gw_port admin_port demo_port py_port prom_port rls_port dead_port < <(python3 - <<'PY'
import socket
socks = []
for _ in range(7):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
PY
)
gw="http://127.0.0.1:$gw_port"
admin="http://127.0.0.1:$admin_port"
prom="http://127.0.0.1:$prom_port"

# wait_for URL SECONDS WHAT: until URL answers 2xx, at most SECONDS.
wait_for() {
    local deadline=$((SECONDS + $2))
    until curl -fsS -o /dev/null --max-time 1 "$1" 2>/dev/null; do
        ((SECONDS < deadline)) || die "$3 did not come up within $2 s ($1)"
        sleep 0.1
    done
}

# ---- upstreams ---------------------------------------------------------------------------
cat >"$work/upstream.py" <<'PY'
# What the demo upstream cannot answer: logins that fail (401) or succeed (200), and fixed
# statuses by path. Every answer has a Content-Length, so connections are kept alive.
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, status, body, headers=()):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.startswith("/api/login"):
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {}
            if "password" not in body:
                return self.answer(400, {"error": "password missing"})
            if body["password"] == "right":
                return self.answer(200, {"ok": True})
            return self.answer(401, {"error": "wrong password"})
        self.do_GET()

    def do_GET(self):
        if self.path.endswith("/fail"):
            return self.answer(500, {"error": "boom"})
        if self.path.endswith("/moved"):
            return self.answer(302, {"moved": True}, [("Location", "/")])
        if self.path.endswith("/missing"):
            return self.answer(404, {"error": "not found"})
        return self.answer(200, {"ok": True})

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
PY
python3 "$work/upstream.py" "$py_port" >"$work/upstream.log" 2>&1 &
pids+=($!)
"$DEMO_UPSTREAM_BIN" "127.0.0.1:$demo_port" >"$work/demo-upstream.log" 2>&1 &
pids+=($!)

# ---- slidegate -----------------------------------------------------------------------------
cat >"$work/slidegate.toml" <<TOML
# Written by dashboards/live_check.sh: routes that move every metric of the dashboard.
[server]
listen = "127.0.0.1:$gw_port"
shutdown_grace = "1s"

[admin]
listen = "127.0.0.1:$admin_port"
token_env = "SLIDEGATE_ADMIN_TOKEN"

[store]
backend = "memory"
on_error = "allow"
max_keys = 40          # small: the flood routes below fill it (kind="full")

[keys]
hash_secret_env = "SLIDEGATE_KEY_SECRET"

[upstreams.auth]       # python3 http.server: 401/200 logins, 400, 302, 404, 500
url = "http://127.0.0.1:$py_port"
timeout = "5s"

[upstreams.demo]       # src/bin/demo-upstream.rs: 200 to everything
url = "http://127.0.0.1:$demo_port"
timeout = "5s"

[upstreams.dead]       # nothing listens here: 502
url = "http://127.0.0.1:$dead_port"
connect_timeout = "200ms"
timeout = "1s"

[[routes]]
name = "login"
path = "/api/login"
methods = ["POST"]
upstream = "auth"
key = [{ part = "json:username", normalize = "lower" }]
on_exceed = "block"
block_for = "1s"
block_growth = 2
headers = false

  [[routes.limits]]
  name = "failed-logins"
  limit = 3
  window = "1m"
  count_status = [401, 403]
  reset_status = [200]

  [[routes.limits]]
  name = "per-ip"
  key = ["ip"]
  limit = 100
  window = "1m"
  count_status = [401, 403]

[[routes]]
name = "otp-send"
path = "/api/otp/send"
methods = ["POST"]
upstream = "demo"
key = ["ip"]
max_key_body_bytes = 1024

  [[routes.limits]]
  name = "per-phone"
  key = [{ part = "json:phone", normalize = "phone", region = "ID", hash = true }]
  limit = 3
  window = "1m"

  [[routes.limits]]
  name = "per-ip"
  limit = 50
  window = "1m"

[[routes]]
name = "flaky"
path = "/api/flaky/*"
upstream = "dead"
key = ["ip"]

  [[routes.limits]]
  name = "upstream-errors"
  limit = 2
  window = "1m"
  count_status = ["5xx"]

[[routes]]
name = "misc"
path = "/misc/*"
upstream = "auth"

[[routes]]
name = "payments"
path = "/api/payments/*"
upstream = "demo"
key = ["route"]
on_exceed = "delay"
max_delay = "3s"

  [[routes.limits]]
  name = "per-second"
  limit = 1
  window = "1s"

[[routes]]
name = "search"
path = "/api/search/*"
upstream = "demo"
on_exceed = "shadow"

  [[routes.limits]]
  name = "per-minute"
  limit = 1
  window = "1m"

[[routes]]
name = "internal"
path = "/internal/*"
upstream = "demo"
exempt = ["127.0.0.1/32"]

  [[routes.limits]]
  name = "per-minute"
  limit = 1
  window = "1m"

[[routes]]
name = "flood-allow"
path = "/flood/allow"
upstream = "demo"
key = ["query:k"]
on_error = "allow"

  [[routes.limits]]
  name = "per-minute"
  limit = 100
  window = "1m"

[[routes]]
name = "flood-deny"
path = "/flood/deny"
upstream = "demo"
key = ["query:k"]
on_error = "deny"

  [[routes.limits]]
  name = "per-minute"
  limit = 100
  window = "1m"

[[routes]]
name = "flood-local"
path = "/flood/local"
upstream = "demo"
key = ["query:k"]
on_error = "local"

  [[routes.limits]]
  name = "per-minute"
  limit = 100
  window = "1m"

[[routes]]
name = "public"
path = "/*"
upstream = "demo"

  [[routes.limits]]
  name = "per-minute"
  limit = 3
  window = "1m"

# Envoy's rate-limit service, driven by bench/rls/load.rs: its decisions show on the panels
# above under route = the domain, its latency in the "Proxies in front" row.
[rls]
listen = "127.0.0.1:$rls_port"
config = "$work/limits.yaml"
TOML
printf 'domain: live\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 5, name: per-user }\n' \
    >"$work/limits.yaml"
cp "$work/slidegate.toml" "$work/slidegate.good.toml"
export SLIDEGATE_ADMIN_TOKEN=live-check-token SLIDEGATE_KEY_SECRET=live-check-secret
export SLIDEGATE_LOG=warn TOKIO_WORKER_THREADS=2
"$SLIDEGATE_BIN" --config "$work/slidegate.toml" >"$work/slidegate.log" 2>&1 &
pids+=($!)

# ---- prometheus ----------------------------------------------------------------------------
cat >"$work/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $rules
scrape_configs:
  - job_name: slidegate       # the alert rules and the process_* panels read job="slidegate"
    scrape_interval: 1s
    scrape_timeout: 1s
    static_configs:
      - targets: ["127.0.0.1:$admin_port"]
YML
"$prometheus_bin" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
    --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$work/prometheus.log" 2>&1 &
pids+=($!)

wait_for "$admin/healthz" 20 "slidegate"
wait_for "http://127.0.0.1:$py_port/" 10 "the python upstream"
wait_for "http://127.0.0.1:$demo_port/" 10 "the demo upstream"
wait_for "$prom/-/ready" 30 "prometheus"

# promql EXPR: the first value of an instant query, or empty.
promql() {
    curl -fsS --max-time 5 "$prom/api/v1/query" --data-urlencode "query=$1" 2>/dev/null \
        | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")' \
        2>/dev/null || true
}
# wait_until EXPR SECONDS WHAT: until the instant query EXPR returns a series.
wait_until() {
    local deadline=$((SECONDS + $2))
    until [[ -n "$(promql "$1")" ]]; do
        ((SECONDS < deadline)) || die "$3: no data within $2 s (query: $1)"
        sleep 0.25
    done
}
# A baseline before the traffic: every counter series exists from config load (at 0), so two
# scrapes now make each rate over the traffic a difference between two real samples.
wait_until 'count_over_time(slidegate_build_info{job="slidegate"}[1m]) >= 2' 20 "baseline scrapes"
say "gateway, upstreams and prometheus up after $((SECONDS - built_at)) s; driving traffic"

# ---- traffic -------------------------------------------------------------------------------
notes=0
# req EXPECTED CURL-ARGS...: one request; a status other than EXPECTED is noted (the queries
# decide pass or fail; a note says why one may have come up empty).
req() {
    local expected=$1 got
    shift
    got=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$@" || true)
    if [[ $got != "$expected" ]]; then
        say "note: expected $expected, got $got: curl $*"
        notes=$((notes + 1))
    fi
}
login() { req "$1" -X POST -H 'Content-Type: application/json' --data "$2" "$gw/api/login"; }
otp() { req "$1" -X POST -H 'Content-Type: application/json' "${@:3}" --data "$2" "$gw/api/otp/send"; }

# The delay room: the second payment waits about a second for the first's unit to leave.
req 200 "$gw/api/payments/charge" &
delayed_pid=$!
req 200 "$gw/api/payments/charge" &
delayed_pid2=$!

# Login: alice fails three times (counted), the fourth exceeds and starts a block, the fifth is
# blocked. Bob logs in (200: his count is reset; per-ip refunds). Carol's answer is a 400 (not
# counted: refunded on both limits). Dave exhausts too: a second block. A body without a
# username, and one naming it twice, are bad requests.
for _ in 1 2 3; do login 401 '{"username":"Alice","password":"guess"}'; done
login 429 '{"username":"alice","password":"guess"}'
login 429 '{"username":"ALICE","password":"right"}'
login 200 '{"username":"bob","password":"right"}'
login 400 '{"username":"carol"}'
for _ in 1 2 3; do login 401 '{"username":"dave","password":"guess"}'; done
login 429 '{"username":"dave","password":"guess"}'
login 400 '{"password":"guess"}'
login 400 '{"username":"eve","username":"mallory","password":"guess"}'

# OTP: one number in three spellings fits three times; the fourth send is refused, the fifth
# from the deny cache. Junk: no number, not a number, a body over 1024 bytes, an encoded body.
otp 200 '{"phone":"+62 812-3456-7890"}'
otp 200 '{"phone":"0812 3456 7890"}'
otp 200 '{"phone":"(0812) 3456.7890"}'
otp 429 '{"phone":"+6281234567890"}'
otp 429 '{"phone":"+6281234567890"}'
otp 400 '{"to":"+6281234567890"}'
otp 400 '{"phone":"not a number"}'
otp 413 "{\"phone\":\"+6281234567891\",\"pad\":\"$(printf '%02000d' 0)\"}"
otp 415 '{"phone":"+6281234567892"}' -H 'Content-Encoding: gzip'

# The dead upstream: two 502s (counted: 5xx), then 429 without reaching it.
req 502 "$gw/api/flaky/a"
req 502 "$gw/api/flaky/b"
req 429 "$gw/api/flaky/c"

# Upstream status classes, shadow, exempt, and a deny-cache flood on the public route.
req 500 "$gw/misc/fail"
req 302 "$gw/misc/moved"
req 404 "$gw/misc/missing"
for _ in 1 2 3; do req 200 "$gw/api/search/q"; done
for _ in 1 2; do req 200 "$gw/internal/status"; done
for _ in 1 2 3; do req 200 "$gw/hello"; done
for _ in 1 2 3 4; do req 429 "$gw/hello"; done

# Reloads: one that succeeds, one of a broken file (refused), then the good file back.
req 200 -X POST -H "Authorization: Bearer $SLIDEGATE_ADMIN_TOKEN" "$admin/admin/reload"
printf '\n[bogus]\nkey = 1\n' >>"$work/slidegate.toml"
req 422 -X POST -H "Authorization: Bearer $SLIDEGATE_ADMIN_TOKEN" "$admin/admin/reload"
cp "$work/slidegate.good.toml" "$work/slidegate.toml"

wait "$delayed_pid" "$delayed_pid2"

# Last, fill the store (max_keys = 40) with new keys: past the limit, each new key is decided
# by its route's on_error (allow: forwarded; deny: 503; local: the in-process fallback).
curl -s -o /dev/null --max-time 20 "$gw/flood/allow?k=[1-60]"
curl -s -o /dev/null --max-time 10 "$gw/flood/deny?k=[1-5]"
curl -s -o /dev/null --max-time 10 "$gw/flood/local?k=[1-5]"

# ShouldRateLimit calls over 10 users, 5 a minute each: allowed, then refused.
"$RLS_LOAD_BIN" "127.0.0.1:$rls_port" 2 --domain live --key user --keys 10 --conns 1 --in-flight 2 \
    >"$work/rls-load.log" 2>&1 || die "the rate-limit service load failed: $(cat "$work/rls-load.log")"

traffic_end=$(date +%s)
say "traffic sent ($notes note(s)); waiting for the scrapes after it"
# Two scrapes after the traffic (and rule evaluations at 1 s), so every rate sees it.
wait_until "max(timestamp(slidegate_build_info{job=\"slidegate\"})) > $((traffic_end + 2))" 20 \
    "scrapes after the traffic"

# ---- the queries ---------------------------------------------------------------------------
python3 - "$dashboard" "$rules" "$prom" <<'PY'
import json
import math
import re
import sys
import urllib.parse
import urllib.request

dashboard_path, rules_path, prom = sys.argv[1:4]
errors, lines = [], []

# Grafana's variables, as an "All" selection and a 30-minute dashboard would give them.
VARIABLES = {
    "instance": ".*", "route": ".*",
    "__rate_interval": "1m", "__interval": "15s", "__interval_ms": "15000",
    "__range": "5m", "__range_s": "300", "__range_ms": "300000",
}


def substitute(expr, where):
    def one(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name not in VARIABLES:
            errors.append(f"{where}: unknown Grafana variable ${name} (teach live_check.sh its value)")
            return m.group(0)
        return VARIABLES[name]
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]", one, expr)


def api(path, params=None):
    url = f"{prom}{path}"
    data = urllib.parse.urlencode(params).encode() if params is not None else None
    try:
        with urllib.request.urlopen(url, data=data, timeout=10) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:  # Prometheus answers 400/422 with a JSON error
        try:
            return json.load(e)
        except ValueError:
            return {"status": "error", "error": f"HTTP {e.code}"}
    except OSError as e:
        return {"status": "error", "error": str(e)}


def query(expr):
    """(error, number of series, largest finite value)"""
    r = api("/api/v1/query", {"query": expr})
    if r.get("status") != "success":
        return r.get("error") or "unknown error", 0, None
    data = r["data"]
    if data["resultType"] == "scalar":
        samples = [data["result"][1]]
    elif data["resultType"] == "vector":
        samples = [s["value"][1] for s in data["result"]]
    else:  # a matrix: a range selector at the top
        return None, len(data["result"]), None
    values = [float(v) for v in samples if not math.isnan(float(v))]
    return None, len(samples), max(values) if values else None


# Dashboard targets, with the row each panel sits in (collapsed rows nest their panels).
with open(dashboard_path, encoding="utf-8") as f:
    dashboard = json.load(f)
targets = []


def walk(panels, row):
    for p in panels:
        if p.get("type") == "row":
            row = p.get("title", "")
            walk(p.get("panels", []), row)
            continue
        for t in p.get("targets", []):
            if t.get("expr", "").strip():
                targets.append((row, p.get("title", "?"), t.get("refId", "?"), t["expr"]))


walk(dashboard.get("panels", []), "")
if not targets:
    errors.append("the dashboard has no targets")
abuse = 0
for row, title, ref, expr in targets:
    where = f"{row} > {title} [{ref}]"
    err, n, top = query(substitute(expr, where))
    if err:
        errors.append(f"{where}: {err}")
        lines.append(f"  ERROR     {where}: {err}")
        continue
    state = "ok" if n else "no series"
    if row == "Abuse":
        abuse += 1
        if n == 0:
            errors.append(f"{where}: no series, although the traffic made it non-zero")
            state = "EMPTY"
        elif not top:
            errors.append(f"{where}: {n} series, all zero, although the traffic made it non-zero")
            state = "ZERO"
    shown = "-" if top is None else f"{top:.4g}"
    lines.append(f"  {state:<9} {n:>3} series  max {shown:<8} {where}")
if abuse == 0:
    errors.append("the dashboard has no Abuse row (or it has no queries)")

# Template variables: label_values(METRIC, LABEL) through the label-values API.
for v in dashboard.get("templating", {}).get("list", []):
    q = v.get("query")
    q = q.get("query") if isinstance(q, dict) else q
    m = re.fullmatch(r"\s*label_values\(\s*([A-Za-z_:][\w:]*(?:\{[^}]*\})?)\s*,\s*(\w+)\s*\)\s*", q or "")
    if not m:
        errors.append(f"variable {v.get('name')}: cannot run {q!r}")
        continue
    r = api(f"/api/v1/label/{m.group(2)}/values?" + urllib.parse.urlencode({"match[]": m.group(1)}))
    if r.get("status") != "success":
        errors.append(f"variable {v.get('name')}: {r.get('error')}")
    elif not r["data"]:
        errors.append(f"variable {v.get('name')}: {q} has no values")
    else:
        lines.append(f"  ok        {len(r['data']):>3} values  variable ${v.get('name')}: {', '.join(r['data'])}")

# Alert rules: as Prometheus loaded them (its own evaluation must have no error), and each
# expr once more as an instant query.
r = api("/api/v1/rules")
loaded = [rule for g in r.get("data", {}).get("groups", []) for rule in g.get("rules", [])]
with open(rules_path, encoding="utf-8") as f:
    in_file = len(re.findall(r"^\s*-\s*(?:alert|record):", f.read(), re.M))
if len(loaded) != in_file:
    errors.append(f"{rules_path}: {in_file} rules in the file, {len(loaded)} loaded by Prometheus")
for rule in loaded:
    name = rule.get("name")
    if rule.get("lastError"):
        errors.append(f"rule {name}: evaluation error: {rule['lastError']}")
    err, n, top = query(rule["query"])
    if err:
        errors.append(f"rule {name}: {err}")
        lines.append(f"  ERROR     rule {name}: {err}")
        continue
    state = rule.get("state", "")
    lines.append(f"  ok        {n:>3} series  rule {name} ({rule.get('health')}{', ' + state if state and state != 'inactive' else ''})")

print("\n".join(lines))
for e in errors:
    print(f"live_check: FAIL: {e}", file=sys.stderr)
if errors:
    sys.exit(1)
print(f"live_check: PASS: {len(targets)} dashboard queries ({abuse} in the Abuse row, all non-zero), "
      f"{len(loaded)} alert rules, template variables, against prometheus at {prom}")
PY
say "done in $((SECONDS - started)) s ($((SECONDS - built_at)) s after the build)"

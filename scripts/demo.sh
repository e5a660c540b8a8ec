#!/usr/bin/env bash
# Starts a working gateway in front of a demo upstream: builds the binaries, starts the demo
# upstream on 127.0.0.1:9000, and runs slidegate on 127.0.0.1:8080 (admin on 127.0.0.1:9091)
# with config.toml. When redis-server is installed it starts a private one for the demo on the
# first free loopback port from 16379 up (DEMO_REDIS_PORT picks another), never touching a Redis
# already on 6379 (someone else's data); otherwise it uses the embedded memory store. It says
# which (DEMO_STORE=memory forces the memory store). Ctrl-C stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "==> building the release binaries (cargo shows its progress; a first build takes several minutes, later ones a few seconds)"
cargo build --release --bins
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT INT TERM

config=config.toml
# listening PORT: whether something accepts connections on 127.0.0.1:PORT.
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
if [ "${DEMO_STORE:-}" != memory ] && command -v redis-server >/dev/null 2>&1; then
  port="${DEMO_REDIS_PORT:-}"
  if [ -z "$port" ]; then
    for p in $(seq 16379 16479); do
      if ! listening "$p"; then port=$p; break; fi
    done
    [ -n "$port" ] || { echo "no free port in 16379..16479 for the demo's Redis (set DEMO_REDIS_PORT)" >&2; exit 1; }
  elif listening "$port"; then
    echo "DEMO_REDIS_PORT=$port is in use: the demo starts a Redis of its own there; pick a free port or leave it unset" >&2
    exit 1
  fi
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do # up to 5 s
    listening "$port" && break
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  if ! listening "$port"; then
    echo "redis-server did not start on 127.0.0.1:$port:" >&2
    cat "$work/redis.log" >&2
    exit 1
  fi
  export SLIDEGATE_REDIS_URL="redis://127.0.0.1:$port"
  echo "==> store: Redis, a private redis-server on 127.0.0.1:$port (started for this demo, stopped on exit)"
else
  sed 's/^backend = "redis".*/backend = "memory"/' config.toml >"$work/config.toml"
  config="$work/config.toml"
  echo "==> store: embedded memory store ($([ "${DEMO_STORE:-}" = memory ] && echo "DEMO_STORE=memory" || echo "no redis-server installed"))"
fi

./target/release/demo-upstream 127.0.0.1:9000 &
upstream=$!
pids+=($upstream)
export SLIDEGATE_ADMIN_TOKEN="${SLIDEGATE_ADMIN_TOKEN:-demo-token}"
./target/release/slidegate --config "$config" &
gateway=$!
pids+=($gateway)
# Up to 10 s for both to listen; one that exits (a port another process holds) ends the demo.
for _ in $(seq 100); do
  kill -0 "$upstream" 2>/dev/null && kill -0 "$gateway" 2>/dev/null || break
  listening 9000 && listening 8080 && listening 9091 && break
  sleep 0.1
done
sleep 0.2
for pid in "$upstream" "$gateway"; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "the demo did not start: $([ "$pid" = "$upstream" ] && echo "demo-upstream (127.0.0.1:9000)" || echo slidegate) exited; its message is above" >&2
    exit 1
  fi
done
cat <<TXT

slidegate is running on http://127.0.0.1:8080 in front of the demo upstream.
Try (the public route allows 3 requests per 10 seconds per client IP):
  for i in 1 2 3 4; do curl -si http://127.0.0.1:8080/hello | head -1; done
  curl -si http://127.0.0.1:8080/hello            # 429 with Retry-After and RateLimit headers
  curl -s  http://127.0.0.1:9091/metrics | grep slidegate_requests_total
  curl -s -H "Authorization: Bearer $SLIDEGATE_ADMIN_TOKEN" 'http://127.0.0.1:9091/admin/usage?route=public&key=127.0.0.1'
Ctrl-C stops it.
TXT
wait

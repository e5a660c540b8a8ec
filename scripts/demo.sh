#!/usr/bin/env bash
# Starts a working gateway in front of a demo upstream: builds the binaries, starts the demo
# upstream on 127.0.0.1:9000, and runs slidegate on 127.0.0.1:8080 (admin on 127.0.0.1:9091)
# with config.toml. It uses Redis when a redis-server is installed (the one already on
# 127.0.0.1:6379, or a private one it starts on 127.0.0.1:6390), and the embedded memory store
# otherwise, and says which (DEMO_STORE=memory forces the memory store). Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --bins --quiet
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT INT TERM

config=config.toml
if [ "${DEMO_STORE:-}" != memory ] && command -v redis-server >/dev/null 2>&1; then
  if (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null && command -v redis-cli >/dev/null && redis-cli -p 6379 ping >/dev/null 2>&1; then
    export SLIDEGATE_REDIS_URL="redis://127.0.0.1:6379"
  else
    redis-server --port 6390 --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
    pids+=($!)
    export SLIDEGATE_REDIS_URL="redis://127.0.0.1:6390"
    sleep 0.5
  fi
  echo "==> store: Redis at $SLIDEGATE_REDIS_URL"
else
  sed 's/^backend = "redis".*/backend = "memory"/' config.toml >"$work/config.toml"
  config="$work/config.toml"
  echo "==> store: embedded memory store ($([ "${DEMO_STORE:-}" = memory ] && echo "DEMO_STORE=memory" || echo "no redis-server installed"))"
fi

./target/release/demo-upstream 127.0.0.1:9000 &
pids+=($!)
export SLIDEGATE_ADMIN_TOKEN="${SLIDEGATE_ADMIN_TOKEN:-demo-token}"
./target/release/slidegate --config "$config" &
pids+=($!)
sleep 1
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

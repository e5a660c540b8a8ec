#!/usr/bin/env bash
# Runs the whole test suite on a fresh Debian machine: installs what the tests need
# (redis-server, which the tests start themselves on free loopback ports), checks formatting
# and lints, then runs every test. Used as-is by CI (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v redis-server >/dev/null 2>&1; then
  echo "==> installing redis-server (the tests start their own instances)"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq redis-server >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is required: install the Rust toolchain (https://rustup.rs)" >&2
  exit 1
fi

echo "==> cargo fmt --check"
cargo fmt --all -- --check
echo "==> cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets --quiet -- -D warnings
echo "==> dashboard queries use only the documented metrics"
bash dashboards/check.sh
echo "==> cargo test"
cargo test --all-targets --quiet -- --test-threads=4

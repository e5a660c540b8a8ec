#!/usr/bin/env bash
# Runs the whole test suite on a fresh Debian machine: installs what the tests need
# (redis-server, which the tests start themselves on free loopback ports, and Debian's
# prometheus package for promtool), checks formatting, the dashboard's queries and the alert
# rules (promtool check and unit tests), lints, then runs every test. Used as-is by CI (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# apt_install PACKAGE: apt-get install, with one package-list update per run.
updated=0
apt_install() {
  if ((!updated)); then as_root apt-get update -qq; updated=1; fi
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "$1" >/dev/null
}
if ! command -v redis-server >/dev/null 2>&1; then
  echo "==> installing redis-server (the tests start their own instances)"
  apt_install redis-server
fi
if ! command -v promtool >/dev/null 2>&1; then
  echo "==> installing prometheus (for promtool: the alert rules are checked and unit-tested)"
  apt_install prometheus
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is required: install the Rust toolchain (https://rustup.rs)" >&2
  exit 1
fi

echo "==> cargo fmt --check"
cargo fmt --all -- --check
# The quick checks first: a broken dashboard or rule fails in seconds, before the builds.
echo "==> dashboard and alert-rule queries use only the documented metrics"
bash dashboards/check.sh
bash dashboards/check.sh deploy/alerts.yml
echo "==> alert rules: promtool check rules, check config (which loads them), test rules"
promtool check rules deploy/alerts.yml
promtool check config deploy/prometheus.yml
promtool test rules deploy/alerts.test.yml
echo "==> cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets --quiet -- -D warnings
echo "==> cargo test"
cargo test --all-targets --quiet -- --test-threads=4

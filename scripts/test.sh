#!/usr/bin/env bash
# Runs the whole test suite on a fresh Debian machine: installs what the tests need
# (redis-server, which the tests start themselves on free loopback ports, and Debian's
# prometheus package for promtool and the Prometheus server), checks formatting, the dashboard's
# queries and the alert rules (promtool check and unit tests, then a live run of every query
# against a real Prometheus scraping a real gateway), lints, then runs every test. Used as-is by
# CI (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
# A one-off build gains nothing from incremental state, which would double the disk the test
# build takes (Cargo.toml says why the build itself is kept small).
export CARGO_INCREMENTAL=0

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
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  echo "==> installing prometheus (promtool checks and unit-tests the alert rules; the server runs the live check)"
  apt_install prometheus
fi
for tool in nginx caddy; do # the forward-auth recipes run behind real NGINX and Caddy
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "==> installing $tool (the forward-auth recipe tests start their own)"
    apt_install "$tool"
  fi
done
for tool in curl python3; do # the dashboard checks and the live check's upstream and queries
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "==> installing $tool"
    apt_install "$tool"
  fi
done
# The phone-number oracle (tests/phone_numbers_oracle.rs): libphonenumber's Python port.
if ! python3 -c 'import phonenumbers' >/dev/null 2>&1 && ! /usr/bin/python3 -c 'import phonenumbers' >/dev/null 2>&1; then
  echo "==> installing python3-phonenumbers (libphonenumber, the oracle of the phone-number tests)"
  apt_install python3-phonenumbers
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
# Builds the gateway (cargo test reuses the build), runs it, a real Prometheus scraping it and
# every dashboard and rule query against that; under a minute once built. Exit 77: no
# Prometheus server binary (the script says why), a failure in CI, a skip elsewhere.
echo "==> live check: dashboard and alert-rule queries against a real Prometheus"
live=0
bash dashboards/live_check.sh || live=$?
if ((live == 77)) && [ -z "${CI:-}" ]; then
  echo "==> live check SKIPPED: no Prometheus server binary (see above)"
elif ((live != 0)); then
  exit "$live"
fi
echo "==> cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets --quiet -- -D warnings
# Plain `cargo test`, not `--all-targets`: it runs the doc tests too, and builds the examples
# as the binaries `tests/embed.rs` starts (`--all-targets` builds them as test harnesses).
echo "==> cargo test"
cargo test --quiet -- --test-threads=4
# The decisions' suites once more on the scripts (EVALSHA) instead of the Functions library: the
# reference models, the coalesced calls, the cluster, outcomes, blocks, slots in flight and
# settled costs hold on both paths.
echo "==> the store's suites again with store.scripts = \"eval\""
SLIDEGATE_TEST_SCRIPTS=eval cargo test --quiet --test decisions -- --test-threads=4

//! Faults under load, the load and the goals shared by the `fault_*` test files (the faults of
//! `bench/faults/run.sh`, shorter, with their goals asserted): while 16 keep-alive clients keep
//! sending requests to two routes, one failing open (`on_error = "allow"`) and one failing
//! closed (`"deny"`), a store or the upstream fails. The goals, for every fault:
//!
//! - no answer the route's `on_error` does not explain: on the open route only 200s (decided by
//!   the store, or forwarded on a store error); on the closed route only 200s decided by the
//!   store or 503s; 502/504 only while the upstream is down; never a 429 (the limit is never
//!   reached), a 500, another status;
//! - no connection dropped (no reset, no refused connect, no answer missing after 5 s) and no
//!   answer slower than [`BOUND`];
//! - recovery: from the moment the store answers again (PING after a restart, the new master
//!   promoted or named by the sentinels), within 2 s a whole second starts in which every
//!   request is decided by the store;
//! - no allowed request uncounted: each key's entries in Redis after the run are at least the
//!   requests the store allowed for it (that the store could have kept: on a restart, Redis
//!   runs with `appendfsync always`; on a failover, what was allowed more than a second before
//!   the master died had replicated).
//!
//! This file holds the gateway's config and the bounds; [`client`] drives the load, [`run`]
//! checks what it saw against the goals, [`probe`] reads the Redis servers (INFO fields, key
//! counts, which users' keys hash to given slots).

pub mod client;
pub mod failover;
pub mod probe;
pub mod run;

use std::time::{Duration, Instant};

/// `store.timeout` of the test gateways.
pub const TIMEOUT_MS: u64 = 200;
/// The slowest answer allowed: `store.timeout` (or the upstream's connect budget) and a generous
/// margin for a loaded machine. A request waiting for a reconnection would take longer.
pub const BOUND: Duration = Duration::from_millis(2000);
/// Recovery goal: a clean second starts within this of the store answering again.
pub const RECOVERY: Duration = Duration::from_secs(2);
/// A never-reached limit: every allowed request stays in Redis for the count check.
pub const LIMIT: u64 = 10_000;
/// Concurrent clients, each on a keep-alive connection of its own.
pub const CLIENTS: usize = 16;
/// Random users besides the hot ones.
pub const USERS: u32 = 300;
/// The most requests one client sends (the load is also bounded in time).
pub const MAX_PER_CLIENT: usize = 20_000;
/// A client's pause between two requests.
pub const PACE: Duration = Duration::from_millis(2);
/// How long a client waits for a whole answer before counting it dropped.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

pub const ROUTES: [&str; 2] = ["allow", "deny"];

/// Both routes: keyed by `X-User`, failing open and closed, one sliding log never reached.
pub fn routes() -> String {
    ROUTES
        .iter()
        .map(|r| {
            format!(
                "[[routes]]\nname = \"{r}\"\npath = \"/{r}/*\"\nupstream = \"up\"\nkey = [\"header:X-User\"]\non_error = \"{r}\"\n  [[routes.limits]]\n  name = \"never\"\n  limit = {LIMIT}\n  window = \"1h\"\n"
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn store(url: &str, prefix: &str) -> String {
    format!(
        "backend = \"redis\"\nurl = \"{url}\"\nkey_prefix = \"{prefix}\"\ntimeout = \"{TIMEOUT_MS}ms\""
    )
}

/// The sliding-log set of `user` on `route` (`lua/README.md`).
pub fn log_key(prefix: &str, route: &str, user: &str) -> String {
    format!("{prefix}:{{{route}|{user}}}#log")
}

/// Polls `check` every 20 ms for up to `limit`; the instant it first held.
pub async fn wait_until(limit: Duration, what: &str, check: impl Fn() -> bool) -> Instant {
    let deadline = Instant::now() + limit;
    loop {
        if check() {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

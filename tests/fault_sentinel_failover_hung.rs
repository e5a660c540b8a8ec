//! A Sentinel failover whose master hangs rather than dies (SIGSTOP: its connections stay open
//! and it answers nothing), under load, with the goals of `support::load`: every answer
//! explained by the route's `on_error`, none dropped or slower than 2 s, a whole second of
//! decisions starting within 2 s of the sentinels naming the promoted replica, and every request
//! allowed more than a second before the master hung still counted on it. The client library
//! would stay on the silent master until the sentinels demote it (never, here: it stays
//! stopped); the gateway asks the sentinels after its calls fail and moves to their master.
//!
//! The test loads the machine and measures how long things take, so it is the only test of its
//! binary: cargo runs test binaries one after another, never two at once. About 13 s.

mod support;

use std::time::Duration;

use support::load::client::Outcome;
use support::load::failover::{self, Acks, Death};
use support::load::probe::zcard_on;
use support::load::run::{assert_goals, missing};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_from_a_hung_master_under_load() {
    let (replicas, _, f) = failover::sentinel_master(Acks::None, Death::Hung).await;
    let run = &f.run;

    run.assert_fault_showed(f.t0, f.killed, f.promoted, |r| {
        r.outcome != Outcome::Decided
    });
    assert_goals(run, f.t0, f.back, |_| false);
    let allowed = run.allowed_per_key(&f.prefix, f.killed - Duration::from_secs(1));
    let lost = missing(&allowed, |k| zcard_on(&[&replicas[0]], k));
    assert!(lost.is_empty(), "allowed requests lost: {lost:?}");
}

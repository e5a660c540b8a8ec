//! A Sentinel failover under load (the `sentinel-failover` fault of `bench/faults/run.sh`, shorter,
//! with its goals asserted): while 16 keep-alive clients keep sending requests to a route failing
//! open and one failing closed, the master of a `redis-sentinel://` store (a replica, three
//! sentinels with quorum 2) is killed. The goals are those of `support::load`: every answer
//! explained by the route's `on_error`, none dropped or slower than 2 s, a whole second of
//! decisions starting within 2 s of the sentinels naming the promoted replica, and every request
//! allowed more than a second before the master died (so replicated) still counted on it.
//!
//! The test loads the machine and measures how long things take, so it is the only test of its
//! binary: cargo runs test binaries one after another, never two at once. About 13 s.

mod support;

use std::time::Duration;

use support::load::client::Outcome;
use support::load::failover::{self, Acks};
use support::load::probe::zcard_on;
use support::load::run::{assert_goals, missing};

/// A `redis-sentinel://` store whose master is killed: the sentinels promote the replica and the
/// gateway follows it within 2 s of their naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_under_load() {
    let (replicas, _, f) = failover::sentinel(Acks::None).await;
    let run = &f.run;

    run.assert_fault_showed(f.t0, f.killed, f.promoted, |r| {
        r.outcome != Outcome::Decided
    });
    assert_goals(run, f.t0, f.back, |_| false);
    // What the old master allowed more than a second before it died had replicated.
    let allowed = run.allowed_per_key(&f.prefix, f.killed - Duration::from_secs(1));
    let lost = missing(&allowed, |k| zcard_on(&[&replicas[0]], k));
    assert!(lost.is_empty(), "allowed requests lost: {lost:?}");
}

//! A Redis Cluster failover under load (the `cluster-failover` fault of `bench/faults/run.sh`,
//! shorter, with its goals asserted): while 16 keep-alive clients keep sending requests to a
//! route failing open and one failing closed, keys spread over the three masters (a few hot
//! ones among them on the first), the first master is killed and its replica (added with
//! `CLUSTER REPLICATE`) promoted. The goals are those of `support::load`: every answer explained
//! by the route's `on_error`, none dropped or slower than 2 s, a whole second of decisions
//! starting within 2 s of the promotion, and every request allowed more than a second before
//! the master died (so replicated) still counted; and the dead node stops only its own keys: in
//! every second between the kill and the promotion, at least [`DECIDED_WHILE_DOWN`] of the
//! requests are decided by the store (about two thirds of the keys live on the other masters).
//! The nodes run with `cluster-require-full-coverage no` (`support::cluster::FailoverCluster`).
//!
//! The test loads the machine and measures how long things take, so it is the only test of its
//! binary: cargo runs test binaries one after another, never two at once. About 13 s.

mod support;

use std::time::Duration;

use support::load::client::Outcome;
use support::load::failover::{self, Acks};
use support::load::probe::zcard_on;
use support::load::run::{assert_goals, missing};

/// The least share of requests decided by the store in each second of the outage.
const DECIDED_WHILE_DOWN: f64 = 0.55;

/// The first of three masters killed: the keys of the two others are decided throughout, its
/// replica is promoted, and the gateway decides there within 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_failover_under_load() {
    let (cluster, f) = failover::cluster(Acks::None).await;
    let run = &f.run;

    run.assert_fault_showed(f.t0, f.killed, f.promoted, |r| {
        r.outcome != Outcome::Decided
    });
    let shares = run.decided_shares(f.killed, f.promoted);
    eprintln!("decided per second of the outage: {shares:.2?}");
    assert!(
        !shares.is_empty() && shares.iter().all(|&s| s >= DECIDED_WHILE_DOWN),
        "one dead master stopped other masters' keys: decided per second of the outage {shares:.2?} (goal >= {DECIDED_WHILE_DOWN})\ntimeline (decided/other per 250 ms): {}",
        run.timeline(f.t0)
    );
    assert_goals(run, f.t0, f.back, |_| false);
    let allowed = run.allowed_per_key(&f.prefix, f.killed - Duration::from_secs(1));
    let alive = [
        &cluster.masters[1],
        &cluster.masters[2],
        &cluster.replicas[0][0],
    ];
    let lost = missing(&allowed, |k| zcard_on(&alive, k));
    assert!(lost.is_empty(), "allowed requests lost: {lost:?}");
}

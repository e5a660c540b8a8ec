//! A Redis Cluster failover under load with `store.replica_acks = 1` (the `cluster-failover`
//! fault of `bench/faults/run.sh` with `FAULTS_REPLICA_ACKS=1`, shorter, with its goals
//! asserted): three masters, the first with two replicas and the others with one; the first
//! master's replicas fall behind (paused for a second) just before it is killed, so it dies
//! holding writes no replica has. Every request the store allowed, up to the end of the run, is still counted
//! after the promotion: an allowed decision was answered only once a replica held it, and the
//! ones the paused replica could not acknowledge went to `on_error`. The other goals are those
//! of `support::load`.
//!
//! The test loads the machine and measures how long things take, so it is the only test of its
//! binary: cargo runs test binaries one after another, never two at once. About 15 s.

mod support;

use std::time::Instant;

use support::load::client::Outcome;
use support::load::failover::{self, Acks};
use support::load::probe::zcard_on;
use support::load::run::{assert_goals, missing};

/// No allowed request is lost in a cluster failover when each waited for a replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_failover_with_replica_acks_loses_no_allowed_request() {
    let (cluster, f) = failover::cluster(Acks::One).await;
    let run = &f.run;

    // The replica's pause shows: the first master's charges went to on_error meanwhile.
    let paused = f.killed - failover::STALL;
    run.assert_fault_showed(f.t0, paused, f.killed, |r| r.outcome != Outcome::Decided);
    assert_goals(run, f.t0, f.back, |_| false);
    let allowed = run.allowed_per_key(&f.prefix, Instant::now());
    let alive: Vec<_> = cluster.masters[1..]
        .iter()
        .chain(cluster.replicas.iter().flatten())
        .collect();
    let lost = missing(&allowed, |k| zcard_on(&alive, k));
    assert!(lost.is_empty(), "allowed requests lost: {lost:?}");
}

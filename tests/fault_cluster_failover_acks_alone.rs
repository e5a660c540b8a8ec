//! A Redis Cluster failover under load with `store.replica_acks = 1` where the first master has
//! one replica (`FAULTS_REPLICA_ACKS=1 bench/faults/run.sh cluster-failover`, shorter, with its
//! goals asserted): the replica falls behind (paused, its link cut, for a second) just before
//! the master is killed, and is promoted with no replica of its own. A `WAIT 1` could never be
//! satisfied there; the wait asks for the replicas the new master has, none, so its third of
//! the keys is decided again within 2 s of the promotion (`support::load`'s recovery goal), and
//! every request the store allowed, before the kill and after it, is still counted.
//!
//! The test loads the machine and measures how long things take, so it is the only test of its
//! binary: cargo runs test binaries one after another, never two at once. About 15 s.

mod support;

use std::time::Instant;

use support::load::client::Outcome;
use support::load::failover::{self, Acks};
use support::load::probe::zcard_on;
use support::load::run::{assert_goals, missing};

/// A promoted replica without replicas decides again, and loses nothing it was acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_failover_to_a_replica_without_replicas_resumes_deciding() {
    let (cluster, f) = failover::cluster(Acks::Alone).await;
    let run = &f.run;

    // The replica's pause shows: the first master's charges went to on_error meanwhile.
    let paused = f.killed - failover::STALL;
    run.assert_fault_showed(f.t0, paused, f.killed, |r| r.outcome != Outcome::Decided);
    assert_goals(run, f.t0, f.back, |_| false);

    let alive: Vec<_> = cluster.masters[1..]
        .iter()
        .chain(cluster.replicas.iter().flatten())
        .collect();
    let before = run.allowed_per_key(&f.prefix, f.killed);
    let lost = missing(&before, |k| zcard_on(&alive, k));
    assert!(lost.is_empty(), "acknowledged requests lost: {lost:?}");
    let all = run.allowed_per_key(&f.prefix, Instant::now());
    let lost = missing(&all, |k| zcard_on(&alive, k));
    assert!(lost.is_empty(), "allowed requests lost: {lost:?}");
}

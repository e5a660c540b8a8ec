//! A Sentinel failover under load with `store.replica_acks = 1` where the master has one
//! replica (`FAULTS_REPLICA_ACKS=1 bench/faults/run.sh sentinel-failover`, shorter, with its
//! goals asserted): the replica falls behind (paused, its link cut, for a second) just before
//! the master is killed, and is promoted with no replica of its own. A `WAIT 1` could never be
//! satisfied there; the wait asks for the replicas the master has, none, so deciding resumes
//! within 2 s of the sentinels naming it (`support::load`'s recovery goal), and every request
//! the store allowed, before the kill and after it, is counted on the promoted replica.
//!
//! The test loads the machine and measures how long things take, so it is the only test of its
//! binary: cargo runs test binaries one after another, never two at once. About 14 s.

mod support;

use std::time::Instant;

use support::load::client::Outcome;
use support::load::failover::{self, Acks};
use support::load::probe::{is_master, zcard_on};
use support::load::run::{assert_goals, missing};

/// A promoted replica without replicas decides again, and loses nothing it was acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_to_a_replica_without_replicas_resumes_deciding() {
    let (replicas, named, f) = failover::sentinel(Acks::Alone).await;
    let run = &f.run;

    // The replica's pause shows: charges went to on_error meanwhile.
    let paused = f.killed - failover::STALL;
    run.assert_fault_showed(f.t0, paused, f.killed, |r| r.outcome != Outcome::Decided);
    assert_goals(run, f.t0, f.back, |_| false);
    let decided_after = run.count(f.back, Instant::now(), |r| r.outcome == Outcome::Decided);
    assert!(decided_after > 0, "nothing decided after the promotion");

    assert!(is_master(&replicas[named]), "the replica was promoted");
    let master = [&replicas[named]];
    let before = run.allowed_per_key(&f.prefix, f.killed);
    let lost = missing(&before, |k| zcard_on(&master, k));
    assert!(lost.is_empty(), "acknowledged requests lost: {lost:?}");
    let all = run.allowed_per_key(&f.prefix, Instant::now());
    let lost = missing(&all, |k| zcard_on(&master, k));
    assert!(lost.is_empty(), "allowed requests lost: {lost:?}");
}

//! A Sentinel failover under load with `store.replica_acks = 1` (the `sentinel-failover` fault
//! of `bench/faults/run.sh` with `FAULTS_REPLICA_ACKS=1`, shorter, with its goals asserted): the
//! master's two replicas fall behind (paused for a second) just before it is killed, so it dies
//! holding writes no replica got. Every request the store allowed, up to the
//! end of the run, is still counted on the promoted replica: an allowed decision was answered
//! only once a replica held it, and the ones they could not acknowledge while paused went to
//! `on_error`. The other goals are those of `support::load`.
//!
//! The test loads the machine and measures how long things take, so it is the only test of its
//! binary: cargo runs test binaries one after another, never two at once. About 14 s.

mod support;

use std::time::Instant;

use support::load::client::Outcome;
use support::load::failover::{self, Acks};
use support::load::probe::{is_master, zcard_on};
use support::load::run::{assert_goals, missing};

/// No allowed request is lost in a sentinel failover when each waited for the replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_with_replica_acks_loses_no_allowed_request() {
    let (replicas, named, f) = failover::sentinel(Acks::One).await;
    let run = &f.run;

    // The replica's pause shows: charges went to on_error meanwhile.
    let paused = f.killed - failover::STALL;
    run.assert_fault_showed(f.t0, paused, f.killed, |r| r.outcome != Outcome::Decided);
    assert_goals(run, f.t0, f.back, |_| false);
    let allowed = run.allowed_per_key(&f.prefix, Instant::now());
    // The master the sentinels name holds every allowed request (the keys live on the master
    // only), also when a second failover followed the first.
    assert!(
        is_master(&replicas[named]),
        "the named replica was promoted"
    );
    let master = [&replicas[named]];
    let lost = missing(&allowed, |k| zcard_on(&master, k));
    assert!(lost.is_empty(), "allowed requests lost: {lost:?}");
}

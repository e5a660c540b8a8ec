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

use std::time::{Duration, Instant};

use support::gateway::{self, config};
use support::load::client::{Keys, Load, Outcome};
use support::load::probe::{info, is_master, zcard_on};
use support::load::run::{assert_goals, missing};
use support::load::{routes, store, wait_until};
use support::redis::RedisServer;
use support::sentinel::Sentinel;
use support::{unique_prefix, upstream};

/// A `redis-sentinel://` store whose master is killed: the sentinels promote the replica and the
/// gateway follows it within 2 s of their naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_under_load() {
    let (mut master, replica, sentinels) = tokio::task::spawn_blocking(|| {
        let master = RedisServer::start();
        let port = master.port.to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
        let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(master.port, 2)).collect();
        (master, replica, sentinels)
    })
    .await
    .unwrap();
    wait_until(Duration::from_secs(20), "replica synced", || {
        info(&replica, "replication").contains("master_link_status:up")
    })
    .await;
    wait_until(
        Duration::from_secs(30),
        "sentinels know the replica and each other",
        || sentinels.iter().all(|s| s.knows(1, 2)),
    )
    .await;
    let up = upstream::start().await;
    let prefix = unique_prefix("fl-sentinel");
    let hosts: Vec<String> = sentinels
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port))
        .collect();
    let url = format!("redis-sentinel://{}/main", hosts.join(","));
    let gw = gateway::start(&config(&store(&url, &prefix), &up.url(), &routes())).await;
    let addr = gw.running().proxy_addr;

    let t0 = Instant::now();
    let load = Load::start(addr, Keys::new(vec!["hot".into()], 0.1));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let killed = Instant::now();
    master.kill();
    let promoted = wait_until(Duration::from_secs(30), "replica promoted", || {
        is_master(&replica)
    })
    .await;
    let named = wait_until(Duration::from_secs(30), "sentinels name it", || {
        sentinels[0].master_port() == Some(replica.port)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let run = load.stop().await;

    run.assert_fault_showed(t0, killed, promoted, |r| r.outcome != Outcome::Decided);
    assert_goals(&run, t0, named, |_| false);
    // What the old master allowed more than a second before it died had replicated.
    let allowed = run.allowed_per_key(&prefix, killed - Duration::from_secs(1));
    let lost = missing(&allowed, |k| zcard_on(&[&replica], k));
    assert!(lost.is_empty(), "allowed requests lost: {lost:?}");
    gw.stop().await;
}

//! A Redis Cluster failover under load (the `cluster-failover` fault of `bench/faults/run.sh`,
//! shorter, with its goals asserted): while 16 keep-alive clients keep sending requests to a
//! route failing open and one failing closed, hot keys among them, the master serving the hot
//! keys' slots is killed and its replica (added with `CLUSTER REPLICATE`) promoted. The goals are
//! those of `support::load`: every answer explained by the route's `on_error`, none dropped or
//! slower than 2 s, a whole second of decisions starting within 2 s of the promotion, and every
//! request allowed more than a second before the master died (so replicated) still counted.
//!
//! The test loads the machine and measures how long things take, so it is the only test of its
//! binary: cargo runs test binaries one after another, never two at once. About 13 s.

mod support;

use std::time::{Duration, Instant};

use support::cluster::SLOTS;
use support::gateway::{self, config};
use support::load::client::{Keys, Load, Outcome};
use support::load::probe::{info, is_master, users_in, zcard_on};
use support::load::run::{assert_goals, missing};
use support::load::{routes, store, wait_until};
use support::redis::{RedisServer, Resp};
use support::{unique_prefix, upstream};

/// The master of the hot key's slot in a cluster killed: its replica is promoted and the
/// gateway decides there within 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_failover_under_load() {
    let (mut masters, replica) = tokio::task::spawn_blocking(cluster_with_a_replica)
        .await
        .unwrap();
    let up = upstream::start().await;
    let prefix = unique_prefix("fl-cfail");
    let hosts: Vec<String> = masters
        .iter()
        .map(|m| format!("127.0.0.1:{}", m.port))
        .collect();
    let url = format!("redis-cluster://{}", hosts.join(","));
    let gw = gateway::start(&config(&store(&url, &prefix), &up.url(), &routes())).await;
    let addr = gw.running().proxy_addr;

    // Hot keys on the master about to die (slots SLOTS[0]).
    let hot = users_in("allow", SLOTS[0].0 as u16..=SLOTS[0].1 as u16, 4);
    let t0 = Instant::now();
    let load = Load::start(addr, Keys::new(hot, 0.2));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let killed = Instant::now();
    masters[0].kill();
    let promoted = wait_until(Duration::from_secs(30), "replica promoted", || {
        is_master(&replica)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let run = load.stop().await;

    run.assert_fault_showed(t0, killed, promoted, |r| r.outcome != Outcome::Decided);
    assert_goals(&run, t0, promoted, |_| false);
    let allowed = run.allowed_per_key(&prefix, killed - Duration::from_secs(1));
    let alive = [&masters[1], &masters[2], &replica];
    let lost = missing(&allowed, |k| zcard_on(&alive, k));
    assert!(lost.is_empty(), "allowed requests lost: {lost:?}");
    gw.stop().await;
}

/// Three masters sharing the slots as [`SLOTS`] says, and a replica of the first
/// (`cluster-node-timeout` 1000 ms, so a dead master fails over in about 2 s).
fn cluster_with_a_replica() -> (Vec<RedisServer>, RedisServer) {
    let args = ["--cluster-enabled", "yes", "--cluster-node-timeout", "1000"];
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_with(&args)).collect();
    let replica = RedisServer::start_with(&args);
    for (node, (from, to)) in masters.iter().zip(SLOTS) {
        let reply = node.cmd(&[
            "CLUSTER",
            "ADDSLOTSRANGE",
            &from.to_string(),
            &to.to_string(),
        ]);
        assert_eq!(reply, Resp::Simple("OK".into()));
    }
    for other in masters[1..].iter().chain([&replica]) {
        masters[0].cmd(&["CLUSTER", "MEET", "127.0.0.1", &other.port.to_string()]);
    }
    let Resp::Bulk(Some(master_id)) = masters[0].cmd(&["CLUSTER", "MYID"]) else {
        panic!("CLUSTER MYID failed")
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    // The replica must know the master before it can follow it.
    while replica.cmd(&["CLUSTER", "REPLICATE", &master_id]) != Resp::Simple("OK".into()) {
        assert!(
            Instant::now() < deadline,
            "CLUSTER REPLICATE never succeeded"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    loop {
        let formed = masters.iter().chain([&replica]).all(|n| {
            let text = info_cluster(n);
            text.contains("cluster_state:ok") && text.contains("cluster_known_nodes:4")
        }) && info(&replica, "replication").contains("master_link_status:up");
        if formed {
            break;
        }
        assert!(Instant::now() < deadline, "the cluster did not form");
        std::thread::sleep(Duration::from_millis(100));
    }
    (masters, replica)
}

fn info_cluster(node: &RedisServer) -> String {
    match node.try_cmd(&["CLUSTER", "INFO"]) {
        Ok(Resp::Bulk(Some(text))) => text,
        _ => String::new(),
    }
}

//! A Redis Cluster slot migration under load (the `cluster-reshard` fault of
//! `bench/faults/run.sh`, shorter, with its goals asserted): while 16 keep-alive clients keep
//! sending requests to a route failing open and one failing closed, hot keys among them, the slot
//! of the hot keys is moved by hand between two masters (`CLUSTER SETSLOT ... MIGRATING/IMPORTING`,
//! `MIGRATE`, `SETSLOT ... NODE`), held one second in the migrating state so that ASK must happen.
//! The goals are those of `support::load`: every answer explained by the route's `on_error`, none
//! dropped or slower than 2 s, a whole second of decisions starting within 2 s of the move, and
//! every request the store allowed still counted on some node; and beyond them, no answer by
//! `on_error` at all: the gateway follows `ASK` (with `ASKING`) and `MOVED` within the call.
//!
//! The test loads the machine and measures how long things take, so it is the only test of its
//! binary: cargo runs test binaries one after another, never two at once. About 9 s.

mod support;

use std::time::{Duration, Instant};

use support::cluster::{RedisCluster, SLOTS};
use support::gateway::{self, config};
use support::load::client::{Keys, Load, Outcome};
use support::load::probe::{errorstat, users_in, zcard_on};
use support::load::run::{assert_goals, missing};
use support::load::{routes, store};
use support::redis::{RedisServer, Resp};
use support::{unique_prefix, upstream};

/// A slot holding hot keys moved between two masters under load (the steps of `redis-cli
/// --cluster reshard`): the moved keys meet ASK while the slot migrates and MOVED after; every
/// request is decided by the store, throughout, and every allowed one is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_slot_migration_under_load() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let up = upstream::start().await;
    let prefix = unique_prefix("fl-move");
    let gw = gateway::start(&config(
        &store(&cluster.url(), &prefix),
        &up.url(),
        &routes(),
    ))
    .await;
    let addr = gw.running().proxy_addr;

    let moved_slot = SLOTS[0].0 as u16;
    let hot = users_in("allow", moved_slot..=moved_slot, 20);
    let (from, to) = (&cluster.nodes[0], &cluster.nodes[1]);
    let id = |n: &RedisServer| match n.cmd(&["CLUSTER", "MYID"]) {
        Resp::Bulk(Some(id)) => id,
        other => panic!("CLUSTER MYID: {other:?}"),
    };
    let (from_id, to_id) = (id(from), id(to));
    let t0 = Instant::now();
    let load = Load::start(addr, Keys::new(hot, 0.3));
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let s = moved_slot.to_string();
    let ok = Resp::Simple("OK".into());
    assert_eq!(
        to.cmd(&["CLUSTER", "SETSLOT", &s, "IMPORTING", &from_id]),
        ok
    );
    assert_eq!(
        from.cmd(&["CLUSTER", "SETSLOT", &s, "MIGRATING", &to_id]),
        ok
    );
    let port = to.port.to_string();
    for _ in 0..100 {
        let Resp::Array(keys) = from.cmd(&["CLUSTER", "GETKEYSINSLOT", &s, "100"]) else {
            panic!("GETKEYSINSLOT failed")
        };
        if keys.is_empty() {
            break;
        }
        let mut migrate = vec![
            "MIGRATE",
            "127.0.0.1",
            port.as_str(),
            "",
            "0",
            "5000",
            "KEYS",
        ];
        let names: Vec<String> = keys
            .into_iter()
            .map(|k| match k {
                Resp::Bulk(Some(k)) => k,
                other => panic!("a key: {other:?}"),
            })
            .collect();
        migrate.extend(names.iter().map(String::as_str));
        assert_eq!(from.cmd(&migrate), ok, "MIGRATE");
    }
    // The keys are on the target while the slot still migrates: requests for them meet ASK.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    for node in [to, from, &cluster.nodes[2]] {
        assert_eq!(node.cmd(&["CLUSTER", "SETSLOT", &s, "NODE", &to_id]), ok);
    }
    let moved = Instant::now();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let run = load.stop().await;

    assert!(errorstat(from, "ASK") > 0, "no ASK redirection happened");
    assert_goals(&run, t0, moved, |_| false);
    let by_on_error = run.count(t0, Instant::now(), |r| r.outcome != Outcome::Decided);
    assert_eq!(
        by_on_error,
        0,
        "requests answered by on_error while a slot moved (ASK and MOVED must be followed)\ntimeline (decided/other per 250 ms): {}",
        run.timeline(t0)
    );
    assert!(
        errorstat(from, "MOVED") > 0,
        "no MOVED redirection happened"
    );
    let allowed = run.allowed_per_key(&prefix, Instant::now());
    let nodes: Vec<&RedisServer> = cluster.nodes.iter().collect();
    let lost = missing(&allowed, |k| zcard_on(&nodes, k));
    assert!(lost.is_empty(), "allowed requests lost: {lost:?}");
    gw.stop().await;
}

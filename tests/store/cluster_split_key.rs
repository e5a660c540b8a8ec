//! A key caught halfway through a slot migration (its sorted set moved, its counter not yet):
//! its node answers a call on both keys with `TRYAGAIN` until the migration ends, and the
//! store keeps sending that decision again within `store.timeout`. The other keys of the same
//! node must not pay for it: a decision on them is made as usual, never failed to `on_error`,
//! however often the stuck key is asked at the same time.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use slidegate::config::{ClockSource, ScriptsMode};
use slidegate::store::DecisionRequest;
use support::cluster::RedisCluster;
use support::redis::{RedisServer, Resp};
use support::store::{bases, limit_sets, redis_store_at};
use support::unique_prefix;

/// `store.timeout`: five times the default's 50 ms, so that a bystander's decision fails only
/// when it waits for the stuck key (sent again for as long as this), not when a loaded test
/// host stalls the process for a moment.
const TIMEOUT: Duration = Duration::from_millis(250);

/// Requests for the stuck key, each from its own client, running beside the others.
const STUCK_CLIENTS: usize = 4;
/// Decisions asked for the other keys of the node, one client after another.
const BYSTANDER_DECISIONS: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_stuck_in_a_migrating_slot_fails_no_other_key_of_its_node() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let store = Arc::new(
        redis_store_at(
            &cluster.url(),
            TIMEOUT,
            ClockSource::Redis,
            ScriptsMode::Auto,
        )
        .await,
    );
    let sets = limit_sets(
        "[[routes]]\nname = \"r\"\npath = \"/*\"\nupstream = \"up\"\n\
         [[routes.limits]]\nname = \"log\"\nlimit = 10000\nwindow = \"1h\"\n\
         [[routes.limits]]\nname = \"counter\"\nlimit = 10000\nwindow = \"1h\"\n\
         algorithm = \"sliding_window_counter\"\n",
    );
    let set = sets[0].clone();
    let prefix = unique_prefix("split");
    let stuck = bases(&prefix, "r", "stuck");
    let owner = cluster.node_of(&stuck[0]);
    let (from, to) = (&cluster.nodes[owner], &cluster.nodes[(owner + 1) % 3]);
    let slot = from.cmd(&["CLUSTER", "KEYSLOT", &stuck[0]]).int();
    // Keys of the same node, in other slots.
    let bystanders: Vec<Vec<String>> = (0..)
        .map(|i| bases(&prefix, "r", &format!("b{i}")))
        .filter(|key| {
            cluster.node_of(&key[0]) == owner
                && from.cmd(&["CLUSTER", "KEYSLOT", &key[0]]).int() != slot
        })
        .take(20)
        .collect();
    store
        .decide(DecisionRequest::charge(&set, &stuck, 1))
        .await
        .expect("the cluster decides");
    for key in &bystanders {
        store
            .decide(DecisionRequest::charge(&set, key, 1))
            .await
            .expect("the cluster decides");
    }

    // The stuck key's two Redis keys: the sorted set moves, the counter stays behind.
    let Resp::Array(keys) = from.cmd(&["KEYS", &format!("*{prefix}*stuck*")]) else {
        panic!("KEYS failed")
    };
    let names: Vec<String> = keys
        .into_iter()
        .filter_map(|k| match k {
            Resp::Bulk(Some(name)) => Some(name),
            _ => None,
        })
        .collect();
    assert_eq!(names.len(), 2, "a sorted set and a counter: {names:?}");
    let sorted_set = names
        .iter()
        .find(|name| matches!(from.cmd(&["TYPE", name]), Resp::Simple(ref t) if t == "zset"))
        .expect("the log's sorted set")
        .clone();
    let id = |n: &RedisServer| match n.cmd(&["CLUSTER", "MYID"]) {
        Resp::Bulk(Some(id)) => id,
        other => panic!("CLUSTER MYID: {other:?}"),
    };
    let (from_id, to_id, slot) = (id(from), id(to), slot.to_string());
    to.cmd(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]);
    from.cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]);
    let port = to.port.to_string();
    let migrated = from.cmd(&["MIGRATE", "127.0.0.1", &port, &sorted_set, "0", "5000"]);
    assert_eq!(migrated, Resp::Simple("OK".into()), "MIGRATE");

    let stop = Instant::now() + Duration::from_secs(2);
    let stuck_asked = Arc::new(AtomicUsize::new(0));
    let stuck_clients: Vec<_> = (0..STUCK_CLIENTS)
        .map(|_| {
            let (store, set, stuck, asked) = (
                store.clone(),
                set.clone(),
                stuck.clone(),
                stuck_asked.clone(),
            );
            tokio::spawn(async move {
                while Instant::now() < stop {
                    let _ = store.decide(DecisionRequest::charge(&set, &stuck, 1)).await;
                    asked.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let mut failed = Vec::new();
    for n in 0..BYSTANDER_DECISIONS {
        let key = &bystanders[n % bystanders.len()];
        if let Err(e) = store.decide(DecisionRequest::charge(&set, key, 1)).await {
            failed.push(e.kind());
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
        if Instant::now() >= stop {
            break;
        }
    }
    for client in stuck_clients {
        client.await.unwrap();
    }
    for node in [to, from] {
        node.cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
    }
    assert!(
        stuck_asked.load(Ordering::Relaxed) >= STUCK_CLIENTS,
        "the stuck key was asked for"
    );
    assert!(
        failed.is_empty(),
        "{} of the other keys' decisions failed while one key was stuck: {failed:?}",
        failed.len()
    );
}

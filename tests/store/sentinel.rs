//! `redis-sentinel://` URLs: the gateway asks a real sentinel for the master and decides there.

use crate::support;

use support::gateway::{self, config};
use support::http::HttpClient;
use support::redis::RedisServer;
use support::sentinel::Sentinel;
use support::{unique_prefix, upstream};

/// A `[store]` on `sentinel`'s master `main`, failing closed.
fn sentinel_store(sentinel: &Sentinel, prefix: &str) -> String {
    format!(
        "backend = \"redis\"\nurl = \"redis-sentinel://127.0.0.1:{}/main\"\nkey_prefix = \"{prefix}\"\ntimeout = \"500ms\"\non_error = \"deny\"",
        sentinel.port
    )
}

/// One route `r` on upstream `up` with a limit `m` of `limit` a minute.
fn route(limit: u64) -> String {
    format!(
        "[[routes]]\nname = \"r\"\npath = \"/*\"\nupstream = \"up\"\n  [[routes.limits]]\n  name = \"m\"\n  limit = {limit}\n  window = \"1m\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_run_on_the_master_the_sentinel_names() {
    let master = RedisServer::start_async().await;
    let master_port = master.port;
    let sentinel = tokio::task::spawn_blocking(move || Sentinel::start(master_port, 1))
        .await
        .unwrap();
    let up = upstream::start().await;
    let prefix = unique_prefix("sentinel");
    let gw = gateway::start(&config(
        &sentinel_store(&sentinel, &prefix),
        &up.url(),
        &route(2),
    ))
    .await;
    let client = HttpClient::default();
    let mut codes = Vec::new();
    for _ in 0..3 {
        codes.push(client.get(&gw.url("/x"), &[]).await.status.as_u16());
    }
    assert_eq!(codes, [200, 200, 429]);
    // The route's one sliding_log set for the client's key (lua/README.md).
    let key = format!("{prefix}:{{r|127.0.0.1}}#log");
    assert_eq!(
        master.cmd(&["ZCARD", &key]).int(),
        2,
        "the master holds the counts"
    );
}

/// A planned failover (`SENTINEL FAILOVER`, as for an upgrade): the old master never fails a
/// call and keeps taking writes until the sentinels demote it, seconds later, and the full
/// resync then wipes them. The gateway hears the sentinels announce the new master and moves
/// at once: the requests allowed after the switch are counted on the new master, not on the
/// old one, where their charges would be lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_failover_moves_decisions_to_the_new_master_at_once() {
    use std::time::Duration;
    use support::load::probe::info;
    use support::load::wait_until;

    let (master, replica, sentinel) = tokio::task::spawn_blocking(|| {
        let master = RedisServer::start();
        let port = master.port.to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
        let sentinel = Sentinel::start(master.port, 1);
        (master, replica, sentinel)
    })
    .await
    .unwrap();
    wait_until(Duration::from_secs(20), "the replica synced", || {
        info(&replica, "replication").contains("master_link_status:up")
    })
    .await;
    wait_until(Duration::from_secs(30), "the sentinel knows it", || {
        sentinel.knows(1, 0)
    })
    .await;
    let up = upstream::start().await;
    let prefix = unique_prefix("planned");
    let gw = gateway::start(&config(
        &sentinel_store(&sentinel, &prefix),
        &up.url(),
        &route(100),
    ))
    .await;
    let client = HttpClient::default();
    assert_eq!(client.get(&gw.url("/x"), &[]).await.status, 200);
    let key = format!("{prefix}:{{r|127.0.0.1}}#log");
    wait_until(Duration::from_secs(5), "the charge replicated", || {
        replica.cmd(&["ZCARD", &key]).int() == 1
    })
    .await;

    let Ok(support::redis::Resp::Simple(ok)) =
        RedisServer::attach(sentinel.port).try_cmd(&["SENTINEL", "FAILOVER", "main"])
    else {
        panic!("SENTINEL FAILOVER refused");
    };
    assert_eq!(ok, "OK");
    wait_until(
        Duration::from_secs(20),
        "the sentinel names the replica",
        || sentinel.master_port() == Some(replica.port),
    )
    .await;
    // The announcement, the client's reconnection and the lanes' check.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let mut allowed = 0;
    for _ in 0..5 {
        if client.get(&gw.url("/x"), &[]).await.status == 200 {
            allowed += 1;
        }
    }
    assert!(allowed > 0, "the new master decides");
    assert_eq!(
        replica.cmd(&["ZCARD", &key]).int(),
        1 + allowed,
        "every request allowed after the switch is counted on the new master (the old one \
         holds {})",
        master.cmd(&["ZCARD", &key]).int()
    );
}

/// A gateway that starts on a healthy sentinel set says nothing of a failover: each worker's
/// first check of the sentinels' master (as its subscription begins, before the store's
/// connection is up) neither warns that they name another master nor reconnects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_on_a_healthy_sentinel_set_reports_no_failover() {
    let master = RedisServer::start_async().await;
    let master_port = master.port;
    let sentinel = tokio::task::spawn_blocking(move || Sentinel::start(master_port, 1))
        .await
        .unwrap();
    let up = upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    let store = sentinel_store(&sentinel, &unique_prefix("sentinel-start"));
    std::fs::write(&path, config(&store, &up.url(), &route(100))).unwrap();
    let process = support::process::Process::start(&path, &[("TOKIO_WORKER_THREADS", "2")]);
    let mut lines = process.lines_until("listening on");
    let proxy = lines[lines.len() - 1]
        .split("listening on ")
        .nth(1)
        .and_then(|after| after.split_whitespace().next())
        .unwrap()
        .to_string();
    let client = HttpClient::default();
    assert_eq!(
        client.get(&format!("http://{proxy}/x"), &[]).await.status,
        200
    );
    // the subscriptions' first checks run beside the start; give them their time
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    lines.extend(process.lines_so_far());
    let warned: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("name another master"))
        .collect();
    assert!(warned.is_empty(), "{warned:?}");
}

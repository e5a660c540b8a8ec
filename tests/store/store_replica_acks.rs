//! `store.replica_acks = N` (SPEC sections 4 and 5): an allowed decision is answered only once
//! N replicas hold its charge (`WAIT` on the connection that ran the script); when fewer
//! acknowledge within `store.timeout`, the route's `on_error` decides, the failure counts as a
//! store error of kind `timeout`, and the charge stays on the master (over-counted, never
//! under-counted). The setting shows in `check` and `/admin/config`.

use crate::support;

use std::time::{Duration, Instant};

use support::admin::auth;
use support::cli_commands::{slidegate, stderr, stdout};
use support::gateway::{self, config};
use support::http::HttpClient;
use support::load::probe::info;
use support::observe::{command_calls, metric};
use support::redis::{RedisServer, Resp};
use support::{unique_prefix, upstream};

/// `store.timeout` of these gateways, which is also `WAIT`'s timeout.
const TIMEOUT: Duration = Duration::from_millis(500);

/// Two routes keyed by `X-User`, one failing closed and one open, one request per user and hour.
const ROUTES: &str = r#"
[[routes]]
name = "deny"
path = "/deny/*"
upstream = "up"
key = ["header:X-User"]
on_error = "deny"
  [[routes.limits]]
  name = "one"
  limit = 1
  window = "1h"

[[routes]]
name = "allow"
path = "/allow/*"
upstream = "up"
key = ["header:X-User"]
on_error = "allow"
  [[routes.limits]]
  name = "one"
  limit = 1
  window = "1h"

[[routes]]
name = "slot"
path = "/slot/*"
upstream = "up"
key = ["header:X-User"]
on_error = "deny"
  [[routes.limits]]
  name = "inflight"
  limit = 1
  algorithm = "concurrency"
  lease = "10m"
"#;

fn store(url: &str, prefix: &str, acks: u32) -> String {
    format!(
        "backend = \"redis\"\nurl = \"{url}\"\nkey_prefix = \"{prefix}\"\ntimeout = \"{}ms\"\nreplica_acks = {acks}",
        TIMEOUT.as_millis()
    )
}

/// A gateway on `master` with `replica_acks = 1`, its upstream, and its key prefix.
async fn gateway_on(
    master: &RedisServer,
    test: &str,
) -> (gateway::Gateway, upstream::Upstream, String) {
    let up = upstream::start().await;
    let prefix = unique_prefix(test);
    let toml = config(&store(&master.url(), &prefix, 1), &up.url(), ROUTES);
    (gateway::start(&toml).await, up, prefix)
}

/// A master and a replica of it, synced.
async fn synced_pair() -> (RedisServer, RedisServer) {
    let (master, replica) = tokio::task::spawn_blocking(|| {
        let master = RedisServer::start();
        let port = master.port.to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
        (master, replica)
    })
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !info(&replica, "replication").contains("master_link_status:up") {
        assert!(Instant::now() < deadline, "the replica never synced");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (master, replica)
}

/// Waits until the gateway has seen `master`'s replica (ROLE), before it stops answering.
async fn seen_replica(gw: &gateway::Gateway, master: &RedisServer) {
    let node = format!("127.0.0.1:{}", master.port);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let metrics = HttpClient::default()
            .get(&gw.admin("/metrics"), &[])
            .await
            .body;
        if metric(&metrics, "slidegate_store_replicas", &[("node", &node)]) == 1.0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the replica never showed: {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn log_key(prefix: &str, route: &str, user: &str) -> String {
    format!("{prefix}:{{{route}|{user}}}#log")
}

fn zcard(server: &RedisServer, key: &str) -> i64 {
    match server.cmd(&["ZCARD", key]) {
        Resp::Int(n) => n,
        other => panic!("ZCARD {key}: {other:?}"),
    }
}

/// With a replica attached, every allowed decision is answered after a `WAIT` on the master
/// and the replica already holds it when the client gets its 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_decision_is_answered_once_the_replica_holds_it() {
    let (master, replica) = synced_pair().await;
    let (gw, _up, prefix) = gateway_on(&master, "acks-held").await;
    let client = HttpClient::default();
    let waits_before = command_calls(&master, "wait");
    for i in 0..10 {
        let user = format!("u{i}");
        let r = client.get(&gw.url("/deny/x"), &[("x-user", &user)]).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(r.header("ratelimit").is_some(), "decided by the store");
        // Answered only once the replica acknowledged: it holds the charge already.
        assert_eq!(zcard(&replica, &log_key(&prefix, "deny", &user)), 1);
    }
    assert!(
        command_calls(&master, "wait") - waits_before >= 10,
        "every charging call is followed by WAIT"
    );
    gw.stop().await;
}

/// When the master's replica does not acknowledge (it stopped answering: paused), an allowed
/// decision waits `store.timeout` for `WAIT`, then follows its route's `on_error` (503 when
/// closed, a plain 200 when open), counted as a store timeout; its charge stays, so the key's
/// next request is refused, at once. (A master without any replica does not wait at all:
/// `store_replica_acks_replicas.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_few_replicas_hand_an_allowed_decision_to_on_error_and_keep_its_charge() {
    let (master, replica) = synced_pair().await;
    let (gw, _up, prefix) = gateway_on(&master, "acks-none").await;
    let client = HttpClient::default();
    seen_replica(&gw, &master).await;
    replica.pause();

    let started = Instant::now();
    let r = client.get(&gw.url("/deny/x"), &[("x-user", "alice")]).await;
    let waited = started.elapsed();
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        waited >= TIMEOUT,
        "answered after {waited:?}, before WAIT's timeout"
    );
    assert_eq!(
        zcard(&master, &log_key(&prefix, "deny", "alice")),
        1,
        "the charge stays"
    );

    let started = Instant::now();
    let r = client.get(&gw.url("/deny/x"), &[("x-user", "alice")]).await;
    assert_eq!(r.status, 429, "the charge counts: {}", r.body);
    assert!(
        started.elapsed() < TIMEOUT,
        "a refusal does not wait for the replicas: {:?}",
        started.elapsed()
    );

    let r = client.get(&gw.url("/allow/x"), &[("x-user", "bob")]).await;
    assert_eq!(r.status, 200, "fails open: {}", r.body);
    assert!(r.header("ratelimit").is_none(), "not decided by the store");
    replica.resume();

    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    let count = |name, labels: &[(&str, &str)]| metric(&metrics, name, labels);
    assert_eq!(
        count("slidegate_store_errors_total", &[("kind", "timeout")]),
        2.0,
        "{metrics}"
    );
    assert_eq!(
        count(
            "slidegate_requests_total",
            &[("route", "deny"), ("decision", "store_error_denied")]
        ),
        1.0
    );
    assert_eq!(
        count(
            "slidegate_requests_total",
            &[("route", "allow"), ("decision", "store_error_allowed")]
        ),
        1.0
    );
    gw.stop().await;
}

/// `check` names the setting in its summary, `/admin/config` shows it, and the memory backend,
/// which has no replicas, warns that it ignores it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_setting_shows_where_the_store_does() {
    let dir = tempfile::tempdir().unwrap();
    let redis = dir.path().join("redis.toml");
    let text = config(
        &store("redis://127.0.0.1:6390", "p", 2),
        "http://127.0.0.1:1",
        ROUTES,
    );
    std::fs::write(&redis, &text).unwrap();
    let out = slidegate(&["check", "--config", redis.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("store redis redis://127.0.0.1:6390 (replica_acks 2)"),
        "{}",
        stdout(&out)
    );

    let memory = dir.path().join("memory.toml");
    let text = config(
        "backend = \"memory\"\nreplica_acks = 1",
        "http://127.0.0.1:1",
        ROUTES,
    );
    std::fs::write(&memory, &text).unwrap();
    let out = slidegate(&["check", "--config", memory.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "{}:10:16: warning: store.replica_acks is ignored: the memory backend has no replicas\n",
            memory.display()
        )
    );

    let master = RedisServer::start_async().await;
    let (gw, _up, _) = gateway_on(&master, "acks-shown").await;
    let (name, value) = auth();
    let shown = HttpClient::default()
        .get(&gw.admin("/admin/config"), &[(name, &value)])
        .await
        .json();
    assert_eq!(shown["store"]["replica_acks"], 1, "{shown}");
    gw.stop().await;
}

/// A slot in flight whose charge the replicas did not acknowledge: the attempt was answered by
/// `on_error` (503) and is over, so its slot is freed, not held for the whole `lease` (10
/// minutes here): once the replica answers again, the key has its slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_whose_charge_the_replicas_did_not_acknowledge_is_freed() {
    let (master, replica) = synced_pair().await;
    let (gw, _up, _prefix) = gateway_on(&master, "acks-slot").await;
    let client = HttpClient::default();
    seen_replica(&gw, &master).await;
    replica.pause();
    let r = client.get(&gw.url("/slot/x"), &[("x-user", "carol")]).await;
    assert_eq!(r.status, 503, "{}", r.body);
    replica.resume();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = client.get(&gw.url("/slot/x"), &[("x-user", "carol")]).await;
        if r.status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the slot stayed taken: {} {}",
            r.status,
            r.body
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gw.stop().await;
}

/// While the replica lags (paused), a `WAIT` blocks the master's connection, and the lane's
/// next call runs only once it returns: after the first `WAIT` that came back short (read even
/// when its call held no allowed decision back), the waits
/// are short probes, so the calls behind them are decided in their own time: every key over
/// its limit is still refused (it was let in by `on_error = "allow"`, its call having run out
/// of time behind a whole `store.timeout` of `WAIT`), and an allowed decision still goes to
/// `on_error`. Once the replica answers again, a `WAIT` counts it and decisions are the
/// store's again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_decided_in_time_while_the_replica_lags() {
    let (master, replica) = synced_pair().await;
    let (gw, _up, _prefix) = gateway_on(&master, "acks-lag").await;
    let client = HttpClient::default();
    seen_replica(&gw, &master).await;
    let users: Vec<String> = (0..8).map(|i| format!("spent{i}")).collect();
    for user in &users {
        let r = client.get(&gw.url("/allow/x"), &[("x-user", user)]).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    replica.pause();
    // the first wait runs out whole: the lag is seen, though its call held no decision back
    // (a refusal is answered at once; its `WAIT` is still read)
    let r = client
        .get(&gw.url("/allow/x"), &[("x-user", &users[0])])
        .await;
    assert_eq!(r.status, 429, "{}", r.body);
    tokio::time::sleep(TIMEOUT + Duration::from_millis(100)).await;

    for user in &users {
        let r = client.get(&gw.url("/allow/x"), &[("x-user", user)]).await;
        assert_eq!(r.status, 429, "{user} is over its limit: {}", r.body);
    }
    let at_once = users.iter().map(|user| {
        let (client, url) = (client.clone(), gw.url("/allow/x"));
        let user = user.clone();
        async move { client.get(&url, &[("x-user", &user)]).await.status }
    });
    let statuses = futures_util::future::join_all(at_once).await;
    assert!(statuses.iter().all(|&s| s == 429), "{statuses:?}");
    let r = client.get(&gw.url("/allow/x"), &[("x-user", "new")]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.header("ratelimit").is_none(), "on_error let it in");

    replica.resume();
    let deadline = Instant::now() + Duration::from_secs(10);
    for i in 0.. {
        let user = format!("later{i}");
        let r = client.get(&gw.url("/deny/x"), &[("x-user", &user)]).await;
        if r.status == 200 {
            assert!(r.header("ratelimit").is_some(), "decided by the store");
            break;
        }
        assert!(Instant::now() < deadline, "still lagging: {}", r.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gw.stop().await;
}

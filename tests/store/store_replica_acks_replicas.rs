//! `store.replica_acks = N` asks for N replicas or for every replica the master has, when
//! fewer (SPEC section 5): the gateway learns each master's replicas (`ROLE` at each
//! connection, and every second while they are fewer than N) and exports them as
//! `slidegate_store_replicas{node}`. A master without replicas (a standalone one, or a replica
//! a failover promoted) decides without waiting: the gauge shows 0 there, and once a replica
//! attaches the gauge shows it and allowed decisions wait for it again.

use crate::support;

use std::time::{Duration, Instant};

use support::gateway::{self, config};
use support::http::HttpClient;
use support::load::probe::info;
use support::load::wait_until;
use support::metrics::value;
use support::observe::command_calls;
use support::process::Process;
use support::redis::{RedisServer, Resp};
use support::sentinel::Sentinel;
use support::{unique_prefix, upstream};

/// `store.timeout` of these gateways, which is also `WAIT`'s timeout.
const TIMEOUT: Duration = Duration::from_millis(500);
/// The most a gauge may take to show a change (`ROLE` is read every second while degraded).
const SEEN_WITHIN: Duration = Duration::from_secs(5);
/// How long a replica missing from `ROLE` is still asked for (the gateway's `LOST_AFTER`).
const LOST_AFTER: Duration = Duration::from_secs(5);
/// Decisions checked on new connections once the first one after a replica's loss was allowed.
const AFTER_THE_LOSS: usize = 30;
/// Workers of the gateway that loses a replica: each has its own connection to the master.
const WORKERS: usize = 4;

/// One route keyed by `X-User`, failing closed, one request per user and hour.
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
"#;

/// A gateway with `replica_acks = 1` on `url`, its upstream, and its key prefix.
async fn gateway_on(url: &str, test: &str) -> (gateway::Gateway, upstream::Upstream, String) {
    let up = upstream::start().await;
    let prefix = unique_prefix(test);
    let store = format!(
        "backend = \"redis\"\nurl = \"{url}\"\nkey_prefix = \"{prefix}\"\ntimeout = \"{}ms\"\nreplica_acks = 1",
        TIMEOUT.as_millis()
    );
    let toml = config(&store, &up.url(), ROUTES);
    (gateway::start(&toml).await, up, prefix)
}

/// `slidegate_store_replicas{node="127.0.0.1:port"}` now (`None`: no such series).
async fn replicas_of(gw: &gateway::Gateway, port: u16) -> Option<f64> {
    replicas_at(&gw.admin("/metrics"), port).await
}

/// `slidegate_store_replicas{node="127.0.0.1:port"}` on the metrics page at `url`.
async fn replicas_at(url: &str, port: u16) -> Option<f64> {
    let metrics = HttpClient::default().get(url, &[]).await.body;
    let node = format!("127.0.0.1:{port}");
    value(&metrics, "slidegate_store_replicas", &[("node", &node)])
}

/// Waits (at most [`SEEN_WITHIN`]) until the gauge of `port` reads `expected`.
async fn await_replicas(gw: &gateway::Gateway, port: u16, expected: Option<f64>) {
    await_replicas_at(&gw.admin("/metrics"), port, expected).await
}

/// Like [`await_replicas`], on the metrics page at `url`.
async fn await_replicas_at(url: &str, port: u16, expected: Option<f64>) {
    let deadline = Instant::now() + SEEN_WITHIN;
    loop {
        let seen = replicas_at(url, port).await;
        if seen == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "slidegate_store_replicas of port {port}: {seen:?}, not {expected:?} within {SEEN_WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn zcard(server: &RedisServer, key: &str) -> i64 {
    match server.cmd(&["ZCARD", key]) {
        Resp::Int(n) => n,
        other => panic!("ZCARD {key}: {other:?}"),
    }
}

/// One request for `user`, which the store must decide and allow (not `on_error`).
async fn allowed(gw: &gateway::Gateway, user: &str) {
    allowed_at(&gw.url("/deny/x"), user).await
}

/// Like [`allowed`], at `url`, on a new connection.
async fn allowed_at(url: &str, user: &str) {
    let r = HttpClient::default().get(url, &[("x-user", user)]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.header("ratelimit").is_some(), "decided by the store");
}

/// A replica of the server on `port`, synced.
async fn replica_of(port: u16) -> RedisServer {
    let replica = tokio::task::spawn_blocking(move || {
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &port.to_string()])
    })
    .await
    .unwrap();
    wait_until(Duration::from_secs(20), "the replica synced", || {
        info(&replica, "replication").contains("master_link_status:up")
    })
    .await;
    replica
}

/// Kills `replica` and waits until `master` no longer counts it.
async fn kill_replica_of(replica: &mut RedisServer, master: &RedisServer) {
    replica.kill();
    wait_until(
        Duration::from_secs(10),
        "the master dropped its replica",
        || info(master, "replication").contains("connected_slaves:0"),
    )
    .await;
}

/// A master without replicas decides without `WAIT` (the gauge reads 0); once a replica
/// attaches, the gauge reads 1 and an allowed decision waits until the replica holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_without_replicas_decides_at_once_until_one_attaches() {
    let master = RedisServer::start_async().await;
    let (gw, _up, prefix) = gateway_on(&master.url(), "acks-alone").await;
    await_replicas(&gw, master.port, Some(0.0)).await;
    let metrics = HttpClient::default()
        .get(&gw.admin("/metrics"), &[])
        .await
        .body;
    assert_eq!(
        value(&metrics, "slidegate_store_replica_acks", &[]),
        Some(1.0)
    );
    for i in 0..5 {
        allowed(&gw, &format!("u{i}")).await;
    }
    assert_eq!(command_calls(&master, "wait"), 0, "no replica: no WAIT");

    let replica = replica_of(master.port).await;
    await_replicas(&gw, master.port, Some(1.0)).await;
    for i in 0..5 {
        let user = format!("v{i}");
        allowed(&gw, &user).await;
        // Answered only once the replica acknowledged: it holds the charge already.
        let key = format!("{prefix}:{{deny|{user}}}#log");
        assert_eq!(zcard(&replica, &key), 1, "the replica holds {key}");
    }
    assert!(command_calls(&master, "wait") >= 5, "WAIT is back");
    gw.stop().await;
}

/// A Sentinel promotes the only replica: its gauge reads 0 (the old master's series is gone)
/// and the store decides again at once; when a replica attaches to it, the gauge reads 1 and
/// `WAIT` goes out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gauge_drops_to_zero_on_promotion_and_recovers_when_a_replica_attaches() {
    let (mut master, sentinels) = tokio::task::spawn_blocking(|| {
        let master = RedisServer::start();
        let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(master.port, 2)).collect();
        (master, sentinels)
    })
    .await
    .unwrap();
    let replica = replica_of(master.port).await;
    wait_until(Duration::from_secs(30), "the sentinels know it all", || {
        sentinels.iter().all(|s| s.knows(1, 2))
    })
    .await;
    let hosts: Vec<String> = sentinels
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port))
        .collect();
    let url = format!("redis-sentinel://{}/main", hosts.join(","));
    let (gw, _up, _prefix) = gateway_on(&url, "acks-promoted").await;
    await_replicas(&gw, master.port, Some(1.0)).await;
    allowed(&gw, "before").await;

    master.kill();
    wait_until(
        Duration::from_secs(30),
        "the sentinels name the replica",
        || sentinels[0].master_port() == Some(replica.port),
    )
    .await;
    await_replicas(&gw, replica.port, Some(0.0)).await;
    assert_eq!(
        replicas_of(&gw, master.port).await,
        None,
        "the old master left"
    );
    allowed(&gw, "after").await;
    let waits = command_calls(&replica, "wait");
    allowed(&gw, "after-again").await;
    assert_eq!(
        command_calls(&replica, "wait"),
        waits,
        "no replica: no WAIT"
    );

    let _new = replica_of(replica.port).await;
    await_replicas(&gw, replica.port, Some(1.0)).await;
    allowed(&gw, "attached").await;
    assert!(command_calls(&replica, "wait") > waits, "WAIT is back");
    gw.stop().await;
}

/// A replica that dies with no failover leaves its master without replicas: each `WAIT` that
/// comes back short has the master's replicas read again, and once `ROLE` has not listed the
/// replica for `LOST_AFTER` (5 s: a replica whose link broke just before a failover may still
/// be promoted, so it is asked for that long) the store decides at once again (the gauge reads
/// 0). Asking on for the dead replica would send every allowed decision to `on_error` until
/// the gateway reconnected, a lasting outage for a fault that is over. The gateway is the real
/// binary with several workers, each with its own connection to the master: the loss is the
/// master's, so every worker stops waiting at once, also one that met no short wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_dies_without_a_failover_is_no_longer_waited_for() {
    let master = RedisServer::start_async().await;
    let mut replica = replica_of(master.port).await;
    let up = upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config_file = dir.path().join("config.toml");
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{}\"\ntimeout = \"{}ms\"\nreplica_acks = 1",
        master.url(),
        unique_prefix("acks-replica-died"),
        TIMEOUT.as_millis()
    );
    std::fs::write(&config_file, config(&store, &up.url(), ROUTES)).unwrap();
    let workers = WORKERS.to_string();
    let gw = Process::start(&config_file, &[("TOKIO_WORKER_THREADS", &workers)]);
    let (proxy, admin) = gw.listening();
    let (url, metrics) = (
        format!("http://{proxy}/deny/x"),
        format!("http://{admin}/metrics"),
    );
    await_replicas_at(&metrics, master.port, Some(1.0)).await;
    allowed_at(&url, "before").await;

    kill_replica_of(&mut replica, &master).await;
    // The decisions of the first LOST_AFTER still wait for it, and fail closed. They come on
    // one connection, so one worker alone meets the short waits.
    let one_connection = HttpClient::default();
    let deadline = Instant::now() + LOST_AFTER + SEEN_WITHIN;
    let mut refused = 0;
    for i in 0.. {
        let r = one_connection
            .get(&url, &[("x-user", &format!("after{i}"))])
            .await;
        if r.status == 200 {
            break;
        }
        assert_eq!(r.status, 503, "{}", r.body);
        refused += 1;
        assert!(
            Instant::now() < deadline,
            "{refused} decisions failed closed {:?} after the replica died",
            LOST_AFTER + SEEN_WITHIN
        );
    }
    // New connections, spread over every worker: none is sent to on_error any more.
    for i in 0..AFTER_THE_LOSS {
        allowed_at(&url, &format!("settled{i}")).await;
    }
    await_replicas_at(&metrics, master.port, Some(0.0)).await;
    let waits = command_calls(&master, "wait");
    allowed_at(&url, "settled").await;
    assert_eq!(command_calls(&master, "wait"), waits, "no replica: no WAIT");
}

/// A replica that dies while no request comes: `ROLE`, read every second whatever the traffic,
/// takes it as lost `LOST_AFTER` later, so the first request after that quiet time is decided
/// at once, not sent to `on_error` for another `LOST_AFTER` by a `WAIT` for a replica gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_dies_while_no_request_comes_costs_no_request() {
    let master = RedisServer::start_async().await;
    let mut replica = replica_of(master.port).await;
    let (gw, _up, _prefix) = gateway_on(&master.url(), "acks-replica-died-quietly").await;
    await_replicas(&gw, master.port, Some(1.0)).await;
    allowed(&gw, "before").await;

    kill_replica_of(&mut replica, &master).await;
    // No request meanwhile: the loss is taken by the reads of `ROLE` alone.
    let deadline = Instant::now() + LOST_AFTER + SEEN_WITHIN;
    while replicas_of(&gw, master.port).await != Some(0.0) {
        assert!(Instant::now() < deadline, "the loss was never taken");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let waits = command_calls(&master, "wait");
    allowed(&gw, "after").await;
    assert_eq!(command_calls(&master, "wait"), waits, "no replica: no WAIT");
}

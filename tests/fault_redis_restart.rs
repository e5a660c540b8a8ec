//! Redis restarted under load (the `redis-restart` fault of `bench/faults/run.sh`, shorter, with
//! its goals asserted): while 16 keep-alive clients keep sending requests to a route failing
//! open and one failing closed, the one Redis (`appendfsync always`) is killed and started again
//! on the same port and files. The goals are those of `support::load`: every answer explained by
//! the route's `on_error`, none dropped or slower than 2 s, a whole second of decisions starting
//! within 2 s of Redis answering PING again, and every request the store allowed still counted
//! after the restart (each was written to the AOF before its answer).
//!
//! The test loads the machine and measures how long things take, so it is the only test of its
//! binary: cargo runs test binaries one after another, never two at once. About 7 s.

mod support;

use std::time::{Duration, Instant};

use support::gateway::{self, config};
use support::load::client::{Keys, Load, Outcome};
use support::load::probe::zcard_on;
use support::load::run::{assert_goals, missing};
use support::load::{routes, store, wait_until};
use support::redis::{RedisServer, Resp};
use support::{unique_prefix, upstream};

/// One Redis (`appendfsync always`) killed and started again: on_error answers meanwhile,
/// decisions resume within 2 s of PING, and every allowed request is still counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted_under_load() {
    let mut redis = tokio::task::spawn_blocking(|| {
        RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"])
    })
    .await
    .unwrap();
    let up = upstream::start().await;
    let prefix = unique_prefix("fl-restart");
    let gw = gateway::start(&config(&store(&redis.url(), &prefix), &up.url(), &routes())).await;
    let addr = gw.running().proxy_addr;

    let t0 = Instant::now();
    let load = Load::start(addr, Keys::new(vec!["hot".into()], 0.1));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let killed = Instant::now();
    redis.kill();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Started again on the same port and files; answers PING once it has read them back.
    let redis = tokio::task::spawn_blocking(move || {
        redis.restart();
        redis
    })
    .await
    .unwrap();
    let back = wait_until(
        Duration::from_secs(10),
        "PING after the restart",
        || matches!(redis.try_cmd(&["PING"]), Ok(Resp::Simple(ref s)) if s == "PONG"),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let run = load.stop().await;

    run.assert_fault_showed(t0, killed, back, |r| r.outcome != Outcome::Decided);
    assert_goals(&run, t0, back, |_| false);
    // Every request the store allowed was written to the AOF before its answer, so the
    // restart kept it.
    let allowed = run.allowed_per_key(&prefix, Instant::now());
    assert!(allowed.len() > 10);
    let lost = missing(&allowed, |k| zcard_on(&[&redis], k));
    assert!(lost.is_empty(), "allowed requests lost: {lost:?}");
    gw.stop().await;
}

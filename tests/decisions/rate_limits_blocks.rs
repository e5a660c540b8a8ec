//! `on_exceed = "block"` end to end: a key is refused for `block_for` even once its window has
//! room; `Retry-After` is the remaining block time, or the window's wait if later (README, "The traffic path");
//! and blocks grow by `block_growth` up to `block_max` and are forgotten after `block_forget`.

use crate::support;

use std::time::{Duration, Instant};

use support::http::HttpClient;
use support::rate_limits::{on_redis, route};
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_mode_rejects_the_key_for_block_for() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let routes = route(
        "otp",
        "\"ip\"",
        "on_exceed = \"block\"\nblock_for = \"2s\"",
        &[("per-second", 2, "1s")],
    );
    let gw = on_redis(&redis, &unique_prefix("block"), &up.url(), &routes).await;
    let client = HttpClient::default();
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(client.get(&gw.url("/otp"), &[]).await);
    }
    let codes: Vec<u16> = statuses.iter().map(|r| r.status.as_u16()).collect();
    assert_eq!(codes, [200, 200, 429, 429, 429]);
    let first_block = &statuses[2];
    let started = Instant::now();
    assert_eq!(first_block.header("retry-after"), Some("2"));
    assert!(first_block.json()["retry_after_ms"].as_u64().unwrap() > 1500);
    assert_eq!(first_block.json()["block_level"], 1, "{}", first_block.body);
    // The window (1s) has room again long before the block (2s) lapses: still rejected.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let during = client.get(&gw.url("/otp"), &[]).await;
    assert_eq!(during.status, 429);
    assert_eq!(
        during.header("retry-after"),
        Some("1"),
        "remaining block time"
    );
    tokio::time::sleep_until((started + Duration::from_millis(2100)).into()).await;
    assert_eq!(
        client.get(&gw.url("/otp"), &[]).await.status,
        200,
        "the block lapsed"
    );
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert!(
        metrics.contains("slidegate_requests_total{decision=\"rejected\",route=\"otp\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("slidegate_requests_total{decision=\"blocked\",route=\"otp\"} 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("slidegate_limit_exceeded_total{limit=\"per-second\",mode=\"enforced\",route=\"otp\"} 4"),
        "{metrics}"
    );
}

/// Waits until `ms` milliseconds (plus a margin) after `from`: a retry at the time a 429 named.
async fn wait_after(from: Instant, ms: u64) {
    tokio::time::sleep_until((from + Duration::from_millis(ms + 60)).into()).await;
}

/// `Retry-After` on a blocking route is the remaining block time, or the window's wait if later
/// (README, "The traffic path"): when the window keeps the key out longer than `block_for`, `Retry-After`
/// says so, the key stays refused past `block_for`, and a client that waits it is let in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_of_a_block_is_the_window_wait_when_that_is_later() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let routes = route(
        "slow",
        "\"ip\"",
        "on_exceed = \"block\"\nblock_for = \"1s\"",
        &[("per-3s", 1, "3s")],
    );
    let gw = on_redis(&redis, &unique_prefix("longwait"), &up.url(), &routes).await;
    let client = HttpClient::default();
    assert_eq!(client.get(&gw.url("/x"), &[]).await.status, 200);
    let refused = client.get(&gw.url("/x"), &[]).await;
    let received = Instant::now();
    assert_eq!(refused.status, 429);
    assert_eq!(
        refused.header("retry-after"),
        Some("3"),
        "the window's wait"
    );
    let retry_ms = refused.json()["retry_after_ms"].as_u64().unwrap();
    assert!((2_500..=3_000).contains(&retry_ms), "{}", refused.body);
    // Past block_for, before the window has room: still refused, counting down to one instant.
    wait_after(received, 1_200).await;
    let during = client.get(&gw.url("/x"), &[]).await;
    assert_eq!(during.status, 429);
    assert_eq!(during.header("retry-after"), Some("2"), "{}", during.body);
    wait_after(received, retry_ms).await;
    assert_eq!(
        client.get(&gw.url("/x"), &[]).await.status,
        200,
        "a client that waited Retry-After is allowed"
    );
}

/// Escalating blocks: the n-th block of a key lasts `block_for * block_growth^(n-1)`, at most
/// `block_max`, its level in the 429 body; after `block_forget` of quiet past a block's end the
/// next block is the first again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_grow_up_to_block_max_and_are_forgotten_after_block_forget() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let routes = route(
        "login",
        "\"ip\"",
        "on_exceed = \"block\"\nblock_for = \"1s\"\nblock_growth = 2\nblock_max = \"2s\"\nblock_forget = \"1s\"",
        &[("per-second", 1, "1s")],
    );
    let gw = on_redis(&redis, &unique_prefix("grow"), &up.url(), &routes).await;
    let client = HttpClient::default();
    // Each round: one allowed request, then the exceed that starts the next block.
    let mut blocks = Vec::new();
    let mut ends = Instant::now();
    for round in 0..3 {
        wait_after(ends, 0).await;
        let allowed = client.get(&gw.url("/login"), &[]).await;
        assert_eq!(allowed.status, 200, "round {round}: {}", allowed.body);
        let refused = client.get(&gw.url("/login"), &[]).await;
        ends = Instant::now();
        assert_eq!(refused.status, 429, "round {round}");
        let body = refused.json();
        let retry_ms = body["retry_after_ms"].as_u64().unwrap();
        ends += Duration::from_millis(retry_ms);
        blocks.push((
            body["block_level"].as_u64().unwrap(),
            refused.header("retry-after").unwrap().to_string(),
        ));
    }
    assert_eq!(
        blocks,
        [(1, "1".into()), (2, "2".into()), (3, "2".into())],
        "1 s, then 2 s, then capped at block_max (2 s)"
    );
    // Quiet for block_forget past the last block's end: the next block is the first again.
    wait_after(ends, 1_000).await;
    assert_eq!(client.get(&gw.url("/login"), &[]).await.status, 200);
    let refused = client.get(&gw.url("/login"), &[]).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.json()["block_level"], 1, "{}", refused.body);
    assert_eq!(refused.header("retry-after"), Some("1"));
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert_eq!(
        support::metrics::value(
            &metrics,
            "slidegate_blocks_started_total",
            &[("route", "login"), ("limit", "per-second")],
        ),
        Some(4.0),
        "{metrics}"
    );
}

/// An instance that meets a block another instance started keeps its refusal only for what is
/// left of that block, not for a whole block from then on: the attempt after the block ends
/// reaches the store and starts the next, longer block, as it would on the instance that
/// started the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_learns_of_a_block_midway_lets_it_end_on_time() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let routes = route(
        "login",
        "\"ip\"",
        "on_exceed = \"block\"\nblock_for = \"4s\"\nblock_growth = 8",
        &[("per-20s", 3, "20s")],
    );
    let prefix = unique_prefix("midway");
    let a = on_redis(&redis, &prefix, &up.url(), &routes).await;
    let b = on_redis(&redis, &prefix, &up.url(), &routes).await;
    let client = HttpClient::default();
    for _ in 0..3 {
        assert_eq!(client.get(&a.url("/x"), &[]).await.status, 200);
    }
    let first = client.get(&a.url("/x"), &[]).await;
    let started = Instant::now();
    assert_eq!(first.json()["block_level"], 1, "{}", first.body);
    // B meets the block midway and answers from its cache afterwards
    wait_after(started, 1_000).await;
    let midway = client.get(&b.url("/x"), &[]).await;
    assert_eq!(midway.status, 429);
    assert_eq!(midway.json()["block_level"], 1, "{}", midway.body);
    // the block ended at 4 s; a whole block from B's first sight of it would run to 5 s
    wait_after(started, 4_300).await;
    let after = client.get(&b.url("/x"), &[]).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "too late to tell"
    );
    assert_eq!(after.status, 429);
    assert_eq!(
        after.json()["block_level"],
        2,
        "the next block: {}",
        after.body
    );
}

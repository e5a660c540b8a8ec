//! `on_exceed = "delay"` end to end: a request over the limit waits for room within `max_delay`
//! instead of being refused, and beyond `max_waiting` waiting requests the answer is an immediate
//! 429.

use crate::support;

use std::time::Duration;

use support::http::HttpClient;
use support::rate_limits::{on_redis, route};
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delay_mode_waits_for_room_within_max_delay() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let routes = route(
        "payments",
        "\"route\"",
        "on_exceed = \"delay\"\nmax_delay = \"1500ms\"\nmax_waiting = 100",
        &[("per-second", 5, "1s")],
    );
    let gw = on_redis(&redis, &unique_prefix("delay"), &up.url(), &routes).await;
    let client = HttpClient::default();
    let results = client.get_concurrently(vec![gw.url("/pay"); 10]).await;
    assert!(results.iter().all(|(s, _)| *s == 200), "{results:?}");
    let late = results
        .iter()
        .filter(|(_, t)| *t >= Duration::from_millis(800))
        .count();
    assert_eq!(
        late, 5,
        "half of them must have waited about a second: {results:?}"
    );
    // Far over the limit: 15 more cannot all fit within 1.5 s at 5/s.
    let statuses: Vec<u16> = client
        .get_concurrently(vec![gw.url("/pay"); 15])
        .await
        .into_iter()
        .map(|r| r.0)
        .collect();
    assert!(
        statuses.contains(&429) && statuses.contains(&200),
        "{statuses:?}"
    );
    // Every request that got through after the first five waited: 5 of the first ten, and
    // every 200 of the fifteen (the window was full when they came).
    let passed_late = statuses.iter().filter(|s| **s == 200).count() as f64;
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    let count = |decision: &str| {
        support::metrics::value(
            &metrics,
            "slidegate_requests_total",
            &[("route", "payments"), ("decision", decision)],
        )
    };
    assert_eq!(count("delayed"), Some(5.0 + passed_late), "{metrics}");
    assert_eq!(count("allowed"), Some(5.0), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delay_mode_bounds_the_waiting_room() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let routes = route(
        "capped",
        "\"route\"",
        "on_exceed = \"delay\"\nmax_delay = \"5s\"\nmax_waiting = 2",
        &[("per-second", 1, "1s")],
    );
    let gw = on_redis(&redis, &unique_prefix("room"), &up.url(), &routes).await;
    let client = HttpClient::default();
    assert_eq!(client.get(&gw.url("/pay"), &[]).await.status, 200);
    let mut results = client.get_concurrently(vec![gw.url("/pay"); 5]).await;
    results.sort();
    let codes: Vec<u16> = results.iter().map(|r| r.0).collect();
    assert_eq!(codes, [200, 200, 429, 429, 429], "{results:?}");
    // a request that waited for room would take about a second (the window's), at the least
    let rejected_fast = results
        .iter()
        .filter(|r| r.0 == 429)
        .all(|r| r.1 < Duration::from_millis(900));
    assert!(
        rejected_fast,
        "beyond max_waiting the answer is immediate: {results:?}"
    );
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert!(
        metrics.contains("slidegate_requests_total{decision=\"delayed\",route=\"capped\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("slidegate_requests_total{decision=\"rejected\",route=\"capped\"} 3"),
        "{metrics}"
    );
}

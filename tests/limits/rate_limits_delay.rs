//! `on_exceed = "delay"` end to end: a request over the limit waits for room within `max_delay`
//! instead of being refused, and beyond `max_waiting` waiting requests the answer is an immediate
//! 429.

use crate::support;

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use support::http::HttpClient;
use support::leaving::{eventually, LeavingGateway};
use support::metrics::value;
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

/// A client that leaves while its request waits for room leaves an access line that says what
/// the route did with it: status 499, decision `delayed`, and the limit it waited on (the
/// request is counted `delayed` in the metrics too; `tests/admin/metrics.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_the_delay_room_is_logged_as_delayed() {
    let up = upstream::start().await;
    let routes = route(
        "paced",
        "\"route\"",
        "on_exceed = \"delay\"\nmax_delay = \"20s\"\nmax_waiting = 10",
        &[("per-window", 1, "10s")],
    );
    let gw = LeavingGateway::start("backend = \"memory\"", &up.url(), "", &routes);
    let client = HttpClient::default();
    let first = client.get(&format!("http://{}/first", gw.proxy), &[]).await;
    assert_eq!(first.status, 200);
    let waiting = || async {
        let metrics = gw.metrics().await;
        let room = value(&metrics, "slidegate_delay_waiting", &[("route", "paced")]);
        (room == Some(1.0)).then_some(())
    };
    let mut stream = TcpStream::connect(gw.proxy).await.unwrap();
    let request = "GET /second HTTP/1.1\r\nHost: gw\r\nX-Request-Id: left-waiting\r\n\r\n";
    stream.write_all(request.as_bytes()).await.unwrap();
    eventually(waiting).await;
    drop(stream);
    let line = gw.access("left-waiting");
    assert_eq!(line["status"], 499, "{line}");
    assert_eq!(line["decision"], "delayed", "{line}");
    assert_eq!(line["limit"], "per-window", "{line}");
}

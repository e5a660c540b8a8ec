//! A limit allows exactly its count and says exactly when to retry, end to end (real
//! redis-server, real upstream, real gateways, real HTTP): two instances sharing one Redis allow
//! exactly the limit between them, and `retry_after_ms` is exact: 300 ms early is still refused,
//! 100 ms after it is allowed.

use crate::support;

use std::time::{Duration, Instant};

use support::gateway::{self, config, redis_store};
use support::http::HttpClient;
use support::rate_limits::{on_redis, route};
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_sharing_redis_allow_exactly_the_limit() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let routes = route("shared", "\"route\"", "", &[("per-minute", 25, "1m")]);
    let cfg = config(
        &redis_store(&redis.url(), &unique_prefix("fleet")),
        &up.url(),
        &routes,
    );
    let a = gateway::start(&cfg).await;
    let b = gateway::start(&cfg).await;
    let client = HttpClient::default();
    let urls = (0..120)
        .map(|i| if i % 2 == 0 { a.url("/x") } else { b.url("/x") })
        .collect();
    let results = client.get_concurrently(urls).await;
    let allowed = results.iter().filter(|r| r.0 == 200).count();
    let rejected = results.iter().filter(|r| r.0 == 429).count();
    assert_eq!(allowed + rejected, 120, "only 200s and 429s: {results:?}");
    assert_eq!((allowed, rejected), (25, 95));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_exact() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let routes = route("exact", "\"ip\"", "", &[("per-3s", 2, "3s")]);
    let gw = on_redis(&redis, &unique_prefix("exact"), &up.url(), &routes).await;
    let client = HttpClient::default();
    assert_eq!(client.get(&gw.url("/a"), &[]).await.status, 200);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(client.get(&gw.url("/a"), &[]).await.status, 200);
    // the wait is counted from the decision, which is between these two instants: the early
    // probe is timed from the first, the late one from the second
    let sent = Instant::now();
    let rejected = client.get(&gw.url("/a"), &[]).await;
    let received = Instant::now();
    assert_eq!(rejected.status, 429);
    let retry_ms = rejected.json()["retry_after_ms"].as_u64().unwrap();
    assert!(
        (2000..=3000).contains(&retry_ms),
        "retry_after_ms {retry_ms}"
    );

    tokio::time::sleep_until((sent + Duration::from_millis(retry_ms - 300)).into()).await;
    assert_eq!(
        client.get(&gw.url("/a"), &[]).await.status,
        429,
        "300 ms early must still be rejected"
    );
    tokio::time::sleep_until((received + Duration::from_millis(retry_ms + 100)).into()).await;
    assert_eq!(
        client.get(&gw.url("/a"), &[]).await.status,
        200,
        "100 ms after Retry-After must be allowed"
    );
}

//! `on_exceed = "shadow"` end to end: every request passes, and `/metrics` counts the ones the
//! limit would have refused as `shadow_rejected`.

use crate::support;

use support::http::HttpClient;
use support::rate_limits::{on_redis, route};
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_counts_but_never_rejects() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let routes = route(
        "dry",
        "\"ip\"",
        "on_exceed = \"shadow\"",
        &[("per-minute", 2, "1m")],
    );
    let gw = on_redis(&redis, &unique_prefix("shadow"), &up.url(), &routes).await;
    let client = HttpClient::default();
    for _ in 0..5 {
        assert_eq!(client.get(&gw.url("/x"), &[]).await.status, 200);
    }
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert!(
        metrics.contains("slidegate_requests_total{decision=\"allowed\",route=\"dry\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("slidegate_requests_total{decision=\"shadow_rejected\",route=\"dry\"} 3"),
        "{metrics}"
    );
}

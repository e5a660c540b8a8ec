//! An attempt in flight counts until it is answered, also when the upstream takes longer than
//! the limit's window: a second attempt while the first is still out is refused, however long
//! ago the first was charged, and once the first is answered the window counts it where it was
//! charged. On the memory store and on Redis, whose scripts each keep it.

use crate::support;

use std::time::{Duration, Instant};

use support::gateway::{self, config, redis_store};
use support::hardening::MEMORY;
use support::http::HttpClient;
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

/// One sent message at a time per user in a 500 ms window; the upstream (`/slow`) answers
/// after 1.5 s, three windows later.
const ROUTE: &str = r#"
[[routes]]
name = "send"
path = "/slow"
upstream = "up"
key = ["header:x-user"]
  [[routes.limits]]
  name = "sent"
  limit = 1
  window = "500ms"
  count_status = [200]
"#;

async fn a_slow_attempt_counts_until_answered(store: &str) {
    let up = upstream::start().await;
    let gw = gateway::start(&config(store, &up.url(), ROUTE)).await;
    let url = gw.url("/slow?ms=1500");
    let first = {
        let (client, url) = (HttpClient::default(), url.clone());
        tokio::spawn(async move { client.get(&url, &[("x-user", "ann")]).await.status })
    };
    up.wait_seen("/slow").await;
    // Two windows after its charge, the first attempt is still out.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let client = HttpClient::default();
    let r = client.get(&url, &[("x-user", "ann")]).await;
    assert_eq!(
        r.status, 429,
        "{store}: the attempt in flight counts: {}",
        r.body
    );
    assert_eq!(first.await.unwrap(), 200);
    // Answered, it counts where it was charged, windows ago: room again once the settlement,
    // which never holds the answer back, has reached the store.
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let r = client
            .get(&gw.url("/slow?ms=1"), &[("x-user", "ann")])
            .await;
        if r.status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{store}: still refused: {}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_memory_store() {
    a_slow_attempt_counts_until_answered(MEMORY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis() {
    let redis = RedisServer::start();
    let store = redis_store(&redis.url(), &unique_prefix("in-flight-window"));
    a_slow_attempt_counts_until_answered(&store).await;
}

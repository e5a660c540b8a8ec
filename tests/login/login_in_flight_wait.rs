//! A refusal that stands on an attempt still in flight tells the time until that attempt's
//! answer is due (the upstream's `timeout` after its charge), not the whole `timeout` again
//! whenever it is asked: a client refused a second after the attempt went out is told at most
//! the rest. On the memory store and on Redis, whose scripts each tell it.

use crate::support;

use std::time::{Duration, Instant};

use support::gateway::{self, config, redis_store};
use support::hardening::MEMORY;
use support::http::HttpClient;
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

/// One failed login at a time per user; the upstream (`/slow`) answers after 5 s, past the
/// test config's upstream `timeout` of 2 s (connect 500 ms).
const ROUTE: &str = r#"
[[routes]]
name = "login"
path = "/slow"
upstream = "up"
key = ["header:x-user"]
on_exceed = "block"
block_for = "1m"
  [[routes.limits]]
  name = "failed-logins"
  limit = 1
  window = "1m"
  count_status = [401]
"#;

/// The upstream's `timeout` of [`config`].
const TIMEOUT: Duration = Duration::from_secs(2);

async fn refused_a_second_into_the_attempt(store: &str) {
    let up = upstream::start().await;
    let gw = gateway::start(&config(store, &up.url(), ROUTE)).await;
    let url = gw.url("/slow?ms=5000");
    let attempt = {
        let (client, url) = (HttpClient::default(), url.clone());
        tokio::spawn(async move { client.get(&url, &[("x-user", "ann")]).await.status })
    };
    // Charged before it was forwarded: once the upstream holds it, its answer is due within
    // the timeout from now at the latest.
    up.wait_seen("/slow").await;
    let forwarded = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let waited = forwarded.elapsed();
    let r = HttpClient::default().get(&url, &[("x-user", "ann")]).await;
    assert_eq!(r.status, 429, "{}", r.body);
    let told = r.json()["retry_after_ms"].as_u64().unwrap();
    let due = (TIMEOUT - waited).as_millis() as u64 + 1;
    assert!(
        (1..=due).contains(&told),
        "told {told} ms, the attempt's answer is due within {due} ms: {}",
        r.body
    );
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(
        r.json()["block_level"],
        0,
        "no block on an attempt in flight"
    );
    assert_eq!(attempt.await.unwrap(), 504);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_store_tells_the_time_until_the_answer_is_due() {
    refused_a_second_into_the_attempt(MEMORY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_tells_the_time_until_the_answer_is_due() {
    let redis = RedisServer::start_async().await;
    refused_a_second_into_the_attempt(&redis_store(&redis.url(), &unique_prefix("due"))).await;
}

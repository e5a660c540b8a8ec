//! `slidegate_store_errors_total` counts each decision the store failed, not each call: requests
//! that arrive together share a call (coalescing) or wait behind it, and when Redis holds that
//! call past `store.timeout` every one of them is answered by `on_error`, so every one counts,
//! as in `slidegate_requests_total`. Redis is paused (`CLIENT PAUSE WRITE`), so the test knows
//! it answered none of them, without a clock.

use crate::support;

use support::gateway::{self, config};
use support::http::HttpClient;
use support::observe::metric;
use support::redis::{RedisServer, Resp};
use support::{unique_prefix, upstream};

/// Requests sent at once while Redis is paused.
const AT_ONCE: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_a_stalled_call_failed_counts_once() {
    let redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"100ms\"\nkey_prefix = \"{}\"",
        redis.url(),
        unique_prefix("per-decision")
    );
    let routes = "[[routes]]\nname = \"r\"\npath = \"/*\"\nupstream = \"up\"\n\
                  key = [\"header:x-user\"]\non_error = \"allow\"\n  [[routes.limits]]\n  \
                  name = \"m\"\n  limit = 3\n  window = \"1m\"\n";
    let gw = gateway::start(&config(&store, &up.url(), routes)).await;
    let client = HttpClient::default();
    assert_eq!(client.status(&gw.url("/x"), &[("x-user", "u")]).await, 200);
    assert_eq!(
        redis.cmd(&["CLIENT", "PAUSE", "60000", "WRITE"]),
        Resp::Simple("OK".into())
    );
    let requests = (0..AT_ONCE).map(|i| {
        let (client, url) = (client.clone(), gw.url("/x"));
        tokio::spawn(async move {
            let user = format!("user-{i}");
            client.get(&url, &[("x-user", user.as_str())]).await.status
        })
    });
    for status in futures_util::future::join_all(requests).await {
        assert_eq!(status.unwrap(), 200, "fails open");
    }
    redis.cmd(&["CLIENT", "UNPAUSE"]);
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    let allowed = metric(
        &metrics,
        "slidegate_requests_total",
        &[("route", "r"), ("decision", "store_error_allowed")],
    );
    assert_eq!(allowed, AT_ONCE as f64, "{metrics}");
    let timeouts = metric(
        &metrics,
        "slidegate_store_errors_total",
        &[("kind", "timeout")],
    );
    assert_eq!(timeouts, AT_ONCE as f64, "{metrics}");
}

//! Who a request counts against: IPv6 clients (behind a trusted proxy) group by
//! `server.ipv6_prefix`, and clients in a route's `exempt` networks pass uncounted.

use crate::support;

use http::Method;
use support::gateway::{self, config, redis_store, with_server, TOKEN};
use support::http::HttpClient;
use support::metrics::value;
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

const IP_ROUTE: &str = r#"
[[routes]]
name = "by-ip"
path = "/*"
upstream = "up"
key = ["ip"]
  [[routes.limits]]
  name = "per-minute"
  limit = 2
  window = "1m"
"#;

const TRUSTED: &str = "trusted_proxies = [\"127.0.0.1/32\"]";

/// The status of a GET from `client` through the trusted proxy at 127.0.0.1.
async fn status_from(http: &HttpClient, url: &str, client: &str) -> u16 {
    http.status(url, &[("x-forwarded-for", client)]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_clients_share_a_quota_per_64_by_default_and_per_address_at_128() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let http = HttpClient::default();
    let auth = format!("Bearer {TOKEN}");

    let by_64 = gateway::start(&with_server(
        &config(
            &redis_store(&redis.url(), &unique_prefix("v6-64")),
            &up.url(),
            IP_ROUTE,
        ),
        TRUSTED,
    ))
    .await;
    let url = by_64.url("/x");
    assert_eq!(status_from(&http, &url, "2001:db8:1:2::1").await, 200);
    assert_eq!(status_from(&http, &url, "2001:db8:1:2::1").await, 200);
    assert_eq!(
        status_from(&http, &url, "2001:db8:1:2::99").await,
        429,
        "another address in the same /64 spends the same quota"
    );
    assert_eq!(
        status_from(&http, &url, "2001:db8:1:3::1").await,
        200,
        "the next /64 has its own"
    );
    let usage = http
        .get(
            &by_64.admin("/admin/usage?route=by-ip&key=2001:db8:1:2::/64"),
            &[("authorization", &auth)],
        )
        .await
        .json();
    assert_eq!(usage["limits"][0]["used"], 2, "{usage}");

    let by_128 = gateway::start(&with_server(
        &config(
            &redis_store(&redis.url(), &unique_prefix("v6-128")),
            &up.url(),
            IP_ROUTE,
        ),
        &format!("{TRUSTED}\nipv6_prefix = 128"),
    ))
    .await;
    let url = by_128.url("/x");
    assert_eq!(status_from(&http, &url, "2001:db8:1:2::1").await, 200);
    assert_eq!(status_from(&http, &url, "2001:db8:1:2::1").await, 200);
    assert_eq!(status_from(&http, &url, "2001:db8:1:2::1").await, 429);
    assert_eq!(
        status_from(&http, &url, "2001:db8:1:2::99").await,
        200,
        "at /128 each address has its own quota"
    );
}

/// `slidegate_requests_total{decision="exempt",route="shared"}`.
async fn exempt_count(http: &HttpClient, gw: &gateway::Gateway) -> f64 {
    let metrics = http.get(&gw.admin("/metrics"), &[]).await.body;
    value(
        &metrics,
        "slidegate_requests_total",
        &[("route", "shared"), ("decision", "exempt")],
    )
    .expect("the exempt series exists from the start")
}

const SHARED_ROUTE: &str = r#"
[[routes]]
name = "shared"
path = "/*"
upstream = "up"
key = ["route"]
exempt = ["198.51.100.0/24"]
  [[routes.limits]]
  name = "per-minute"
  limit = 3
  window = "1m"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exempt_clients_pass_uncounted_past_an_exhausted_limit() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let http = HttpClient::default();
    // One quota shared by everyone (key = ["route"]): anything exempt requests spent, the
    // others would miss.
    let gw = gateway::start(&with_server(
        &config(
            &redis_store(&redis.url(), &unique_prefix("exempt")),
            &up.url(),
            SHARED_ROUTE,
        ),
        TRUSTED,
    ))
    .await;
    let before = exempt_count(&http, &gw).await;
    let counted = "203.0.113.5";
    let exempt = "198.51.100.7";

    assert_eq!(
        status_from(&http, &gw.url("/counted-1"), counted).await,
        200
    );
    for i in 0..3 {
        let url = gw.url(&format!("/exempt-{i}"));
        assert_eq!(status_from(&http, &url, exempt).await, 200);
    }
    assert_eq!(
        status_from(&http, &gw.url("/counted-2"), counted).await,
        200,
        "the exempt requests took nothing of the shared quota"
    );
    assert_eq!(
        status_from(&http, &gw.url("/counted-3"), counted).await,
        200
    );
    assert_eq!(
        status_from(&http, &gw.url("/counted-4"), counted).await,
        429
    );
    for i in 3..5 {
        let url = gw.url(&format!("/exempt-{i}"));
        assert_eq!(
            status_from(&http, &url, exempt).await,
            200,
            "exempt past the exhausted limit"
        );
    }

    assert_eq!(exempt_count(&http, &gw).await - before, 5.0);
    let seen = up.seen();
    for i in 0..5 {
        assert!(seen.contains(&format!("/exempt-{i}")), "{seen:?}");
    }
    assert!(!seen.contains(&"/counted-4".to_string()));
    let usage = http
        .get(
            &gw.admin("/admin/usage?route=shared&key=shared"),
            &[("authorization", &format!("Bearer {TOKEN}"))],
        )
        .await
        .json();
    assert_eq!(usage["limits"][0]["used"], 3, "{usage}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_peer_cannot_claim_an_exempt_address() {
    let up = upstream::start().await;
    let http = HttpClient::default();
    let gw = gateway::start(&config("backend = \"memory\"", &up.url(), SHARED_ROUTE)).await;
    let claims = [("x-forwarded-for", "198.51.100.7")];
    let mut codes = Vec::new();
    for _ in 0..4 {
        codes.push(
            http.send(Method::GET, &gw.url("/x"), &claims, "")
                .await
                .status
                .as_u16(),
        );
    }
    assert_eq!(codes, [200, 200, 200, 429]);
    assert_eq!(exempt_count(&http, &gw).await, 0.0);
}

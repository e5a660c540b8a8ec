//! Rate-limit headers and 429 bodies on the traffic path: a 429 carries every header and body
//! field, and `headers = false` removes the rate-limit headers from every response of its route but
//! keeps `Retry-After`.

use crate::support;

use http::Method;
use support::gateway::{self, config, redis_store};
use support::http::HttpClient;
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

const MEMORY: &str = "backend = \"memory\"";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_carries_every_header_and_body_field() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let routes = r#"
[[routes]]
name = "otp-send"
path = "/api/otp/*"
methods = ["POST"]
upstream = "up"
key = ["ip"]
  [[routes.limits]]
  name = "per-minute"
  limit = 5
  window = "1m"
  [[routes.limits]]
  name = "per-hour"
  limit = 20
  window = "1h"
"#;
    let gw = gateway::start(&config(
        &redis_store(&redis.url(), &unique_prefix("hdr")),
        &up.url(),
        routes,
    ))
    .await;
    let client = HttpClient::default();
    let url = gw.url("/api/otp/send");
    let first = client.send(Method::POST, &url, &[], "").await;
    assert_eq!(first.status, 200);
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"per-minute\";q=5;w=60, \"per-hour\";q=20;w=3600")
    );
    assert_eq!(first.header("ratelimit"), Some("\"per-minute\";r=4;t=60"));
    assert_eq!(first.header("x-ratelimit-limit"), Some("5"));
    assert_eq!(first.header("x-ratelimit-remaining"), Some("4"));
    assert_eq!(first.header("x-ratelimit-reset"), Some("60"));
    for _ in 0..4 {
        assert_eq!(client.send(Method::POST, &url, &[], "").await.status, 200);
    }
    let r = client.send(Method::POST, &url, &[], "").await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let retry_after: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((59..=60).contains(&retry_after), "{retry_after}");
    assert_eq!(
        r.header("ratelimit-policy"),
        Some("\"per-minute\";q=5;w=60, \"per-hour\";q=20;w=3600")
    );
    assert_eq!(
        r.header("ratelimit"),
        Some(format!("\"per-minute\";r=0;t={retry_after}").as_str())
    );
    assert_eq!(r.header("x-ratelimit-limit"), Some("5"));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(
        r.header("x-ratelimit-reset"),
        Some(retry_after.to_string().as_str())
    );
    let body = r.json();
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(body["title"], "Too Many Requests");
    assert_eq!(body["status"], 429);
    assert_eq!(body["error"], "rate_limited");
    assert_eq!(body["route"], "otp-send");
    assert_eq!(body["limit"], "per-minute");
    assert_eq!(body["violated-policies"], serde_json::json!(["per-minute"]));
    let ms = body["retry_after_ms"].as_u64().unwrap();
    assert!(
        ms > 58_000 && ms <= 60_000 && ms.div_ceil(1000) == retry_after,
        "{ms}"
    );
}

/// The rate-limit headers a route can turn off (README, "Protecting OTP and login endpoints").
const RATE_LIMIT_HEADERS: [&str; 5] = [
    "ratelimit-policy",
    "ratelimit",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
];

/// `headers = false` tells a client nothing of the quota: no rate-limit header on allowed
/// responses nor on 429s, which keep `Retry-After` and their problem body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_false_removes_the_rate_limit_headers_from_every_response() {
    let up = upstream::start().await;
    let route = |name: &str, path: &str, headers: &str| {
        format!("[[routes]]\nname = \"{name}\"\npath = \"{path}\"\nupstream = \"up\"\n{headers}\n  [[routes.limits]]\n  name = \"m\"\n  limit = 1\n  window = \"1m\"\n")
    };
    let routes = route("quiet", "/quiet", "headers = false") + &route("loud", "/loud", "");
    let gw = gateway::start(&config(MEMORY, &up.url(), &routes)).await;
    let client = HttpClient::default();
    let shown = |r: &support::http::Reply| -> Vec<&str> {
        RATE_LIMIT_HEADERS
            .into_iter()
            .filter(|h| r.header(h).is_some())
            .collect()
    };
    let ok = client.get(&gw.url("/quiet"), &[]).await;
    assert_eq!(ok.status, 200);
    assert_eq!(shown(&ok), Vec::<&str>::new(), "{:?}", ok.headers);
    let rejected = client.get(&gw.url("/quiet"), &[]).await;
    assert_eq!(rejected.status, 429);
    assert_eq!(
        shown(&rejected),
        Vec::<&str>::new(),
        "no quota on a quiet route's 429 either: {:?}",
        rejected.headers
    );
    let retry_after: u64 = rejected.header("retry-after").unwrap().parse().unwrap();
    assert!((59..=60).contains(&retry_after), "{retry_after}");
    let body = rejected.json();
    assert_eq!(body["error"], "rate_limited");
    assert_eq!(
        body["retry_after_ms"].as_u64().unwrap().div_ceil(1000),
        retry_after
    );
    // Deny-cached 429s are as quiet.
    let again = client.get(&gw.url("/quiet"), &[]).await;
    assert_eq!(again.status, 429);
    assert_eq!(shown(&again), Vec::<&str>::new(), "{:?}", again.headers);
    assert!(again.header("retry-after").is_some());

    // The same route with the default (`headers = true`) shows them all, both ways.
    let ok = client.get(&gw.url("/loud"), &[]).await;
    assert_eq!(shown(&ok), RATE_LIMIT_HEADERS, "{:?}", ok.headers);
    let rejected = client.get(&gw.url("/loud"), &[]).await;
    assert_eq!(rejected.status, 429);
    assert_eq!(
        shown(&rejected),
        RATE_LIMIT_HEADERS,
        "{:?}",
        rejected.headers
    );
}

/// `t` and `X-RateLimit-Reset` count from when the answer goes out, not from the decision: an
/// upstream that takes 1.5 s to answer the first request of a 10 s window leaves 9 s (8.5
/// rounded up), as the next request, answered at once, also says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resets_count_from_the_answer_not_from_the_decision() {
    let up = upstream::start().await;
    let routes = r#"
[[routes]]
name = "slow"
path = "/*"
upstream = "up"
key = ["route"]
  [[routes.limits]]
  name = "per-10s"
  limit = 10
  window = "10s"
"#;
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let client = HttpClient::default();
    let slow = client.get(&gw.url("/slow?ms=1500"), &[]).await;
    assert_eq!(slow.status, 200);
    assert_eq!(slow.header("ratelimit"), Some("\"per-10s\";r=9;t=9"));
    assert_eq!(slow.header("x-ratelimit-reset"), Some("9"));
    let next = client.get(&gw.url("/fast"), &[]).await;
    assert_eq!(next.header("ratelimit"), Some("\"per-10s\";r=8;t=9"));
}

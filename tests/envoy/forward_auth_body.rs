//! Forward auth with the original body (Traefik's `forwardBody: true`, or any proxy that sends
//! the body with its subrequest): body key parts read it as on the traffic path, within
//! `max_key_body_bytes`; a subrequest without a body asks about a request whose body parts are
//! missing.

use crate::support;

use http::Method;
use support::gateway::{self, redis_store, Gateway};
use support::http::HttpClient;
use support::redis::RedisServer;
use support::unique_prefix;

/// Forward auth for an OTP route without upstream, keyed by phone number (3 per 10 minutes),
/// reading at most 256 bytes of body; Traefik (127.0.0.1) is a trusted proxy.
async fn gateway(redis: &RedisServer) -> Gateway {
    let store = redis_store(&redis.url(), &unique_prefix("fab"));
    gateway::start(&format!(
        r#"
[server]
listen = "127.0.0.1:0"
trusted_proxies = ["127.0.0.1/32"]

[admin]
listen = "127.0.0.1:0"

[store]
{store}

[forward_auth]
listen = "127.0.0.1:0"

[[routes]]
name = "otp-send"
path = "/api/otp/send"
methods = ["POST"]
key = [{{ part = "json:phone", normalize = "phone", region = "ID" }}]
max_key_body_bytes = 256

  [[routes.limits]]
  name = "per-phone"
  limit = 3
  window = "10m"
"#
    ))
    .await
}

/// What Traefik's ForwardAuth with `forwardBody: true` sends for a `POST /api/otp/send` whose
/// body is `body`.
async fn ask(c: &HttpClient, gw: &Gateway, body: &str) -> support::http::Reply {
    let url = format!("http://{}/", gw.running().forward_auth_addr.unwrap());
    let headers = [
        ("x-forwarded-method", "POST"),
        ("x-forwarded-proto", "http"),
        ("x-forwarded-host", "api.example.com"),
        ("x-forwarded-uri", "/api/otp/send"),
        ("x-forwarded-for", "203.0.113.50"),
        ("content-type", "application/json"),
    ];
    c.send(Method::POST, &url, &headers, body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subrequest_with_the_body_is_keyed_by_it() {
    let redis = RedisServer::start();
    let gw = gateway(&redis).await;
    let c = HttpClient::default();
    let spellings = [
        r#"{"phone":"0812-3456-7890"}"#,
        r#"{"phone":"+62 812 3456 7890"}"#,
        r#"{"phone":"(0812) 3456 7890"}"#,
    ];
    for body in spellings {
        let r = ask(&c, &gw, body).await;
        assert_eq!(r.status, 200, "{body}: {}", r.body);
    }
    let fourth = ask(&c, &gw, r#"{"phone":"6281234567890"}"#).await;
    assert_eq!(fourth.status, 429, "{}", fourth.body);
    assert_eq!(fourth.json()["limit"], "per-phone");
    // Another number has its own three.
    let other = ask(&c, &gw, r#"{"phone":"0813-0000-1111"}"#).await;
    assert_eq!(other.status, 200, "{}", other.body);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_max_key_body_bytes_or_none_at_all_is_refused() {
    let redis = RedisServer::start();
    let gw = gateway(&redis).await;
    let c = HttpClient::default();
    let padded = format!(
        r#"{{"phone":"0812-3456-7890","pad":"{}"}}"#,
        "x".repeat(300)
    );
    let r = ask(&c, &gw, &padded).await;
    assert_eq!(r.status, 413, "{}", r.body);
    assert_eq!(r.json()["error"], "body_too_large");
    // NGINX's auth_request and Caddy send no body: the phone is missing.
    let r = ask(&c, &gw, "").await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"], "missing_key");
    gw.stop().await;
}

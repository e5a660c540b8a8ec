//! Forward auth: a proxy in front asks before it forwards (the original method and URI in
//! `X-Forwarded-Method`/`X-Forwarded-Uri` or NGINX's `X-Original-Method`/`X-Original-URI`),
//! and gets 200 with the rate-limit headers or a refusal (429, or 403 for NGINX) with
//! `Retry-After`, the headers and the problem body, decided as on the traffic path.

use crate::support;

use support::gateway::{self, redis_store, Gateway};
use support::http::HttpClient;
use support::redis::RedisServer;
use support::unique_prefix;

/// A gateway with forward auth (`refused_status`), `server` settings, and one route without
/// upstream: 3 a minute per client IP on `/api/otp/*`.
async fn gateway(redis: &RedisServer, server: &str, forward_auth: &str, extra: &str) -> Gateway {
    let store = redis_store(&redis.url(), &unique_prefix("fa"));
    gateway::start(&format!(
        r#"
[server]
listen = "127.0.0.1:0"
{server}

[admin]
listen = "127.0.0.1:0"

[store]
{store}

[forward_auth]
listen = "127.0.0.1:0"
{forward_auth}

[[routes]]
name = "otp"
path = "/api/otp/*"
methods = ["POST"]
key = ["ip"]

  [[routes.limits]]
  name = "per-ip"
  limit = 3
  window = "1m"
{extra}
"#
    ))
    .await
}

fn url(gw: &Gateway) -> String {
    format!("http://{}/auth", gw.running().forward_auth_addr.unwrap())
}

const TRUSTED: &str = "trusted_proxies = [\"127.0.0.1/32\"]";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_then_refused_with_headers_and_a_problem_body() {
    let redis = RedisServer::start();
    let gw = gateway(&redis, TRUSTED, "", "").await;
    let c = HttpClient::default();
    let ask = |client: &'static str| {
        let c = c.clone();
        let url = url(&gw);
        async move {
            let h = [
                ("x-forwarded-method", "POST"),
                ("x-forwarded-uri", "/api/otp/send?to=1"),
                ("x-forwarded-for", client),
            ];
            c.get(&url, &h).await
        }
    };
    let first = ask("203.0.113.1").await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"per-ip\";q=3;w=60")
    );
    assert_eq!(first.header("x-ratelimit-remaining"), Some("2"));
    assert!(first.header("x-request-id").is_some());
    ask("203.0.113.1").await;
    ask("203.0.113.1").await;
    let refused = ask("203.0.113.1").await;
    assert_eq!(refused.status, 429);
    assert!(refused.header("retry-after").is_some());
    assert!(refused.header("ratelimit").unwrap().contains("r=0"));
    let body = refused.json();
    assert_eq!(
        (body["status"].as_u64(), body["route"].as_str()),
        (Some(429), Some("otp"))
    );
    // Another client behind the same proxy has its own count (the trusted proxy's header).
    assert_eq!(ask("203.0.113.2").await.status, 200);
    // A request no route takes is allowed, uncounted, without headers.
    let h = [
        ("x-forwarded-method", "GET"),
        ("x-forwarded-uri", "/elsewhere"),
    ];
    let free = c.get(&url(&gw), &h).await;
    assert_eq!(
        (free.status.as_u16(), free.header("ratelimit")),
        (200, None)
    );
    // The proxy listener does not serve a route without upstream.
    let direct = c
        .send(http::Method::POST, &gw.url("/api/otp/send"), &[], "")
        .await;
    assert_eq!(direct.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_gets_403_with_the_same_headers_and_body() {
    let redis = RedisServer::start();
    let gw = gateway(&redis, TRUSTED, "refused_status = 403", "").await;
    let c = HttpClient::default();
    let h = [
        ("x-original-method", "POST"),
        ("x-original-uri", "/api/otp/send"),
    ];
    for _ in 0..3 {
        assert_eq!(c.get(&url(&gw), &h).await.status, 200);
    }
    let refused = c.get(&url(&gw), &h).await;
    assert_eq!(refused.status, 403);
    assert!(refused.header("retry-after").is_some());
    let body = refused.json();
    assert_eq!(
        (body["status"].as_u64(), body["error"].as_str()),
        (Some(403), Some("rate_limited"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_original_uri_is_required_and_read_as_the_traffic_path_reads_one() {
    let redis = RedisServer::start();
    let gw = gateway(&redis, TRUSTED, "", "").await;
    let c = HttpClient::default();
    let get = |h: Vec<(&'static str, &'static str)>| {
        let (c, url) = (c.clone(), url(&gw));
        async move { c.get(&url, &h).await }
    };
    let missing = get(vec![("x-forwarded-method", "POST")]).await;
    assert_eq!(missing.status, 400);
    assert_eq!(missing.json()["error"], "missing_original_uri");
    let bad = get(vec![("x-forwarded-uri", "*")]).await;
    assert_eq!(
        (bad.status.as_u16(), bad.json()["error"].as_str()),
        (400, Some("bad_original_request"))
    );
    let above = get(vec![
        ("x-forwarded-method", "POST"),
        ("x-forwarded-uri", "/../etc"),
    ])
    .await;
    assert_eq!(
        (above.status.as_u16(), above.json()["error"].as_str()),
        (400, Some("path_above_root"))
    );
    // Every spelling of the path spends one quota: an absolute URI, dot-segments, doubled
    // slashes, another case.
    let client = ("x-forwarded-for", "198.51.100.3");
    for uri in [
        "http://example.com/api/otp/send",
        "/api/x/../otp//send",
        "/API/OTP/send",
    ] {
        let h = vec![
            ("x-forwarded-method", "POST"),
            ("x-forwarded-uri", uri),
            client,
        ];
        assert_eq!(get(h).await.status, 200, "{uri}");
    }
    let h = vec![
        ("x-forwarded-method", "post"),
        ("x-forwarded-uri", "/api/otp/send"),
        client,
    ];
    assert_eq!(get(h).await.status, 429);
}

/// NGINX passes the client's own headers to its subrequest, so a client can add an
/// `X-Forwarded-Uri` or `X-Forwarded-Method` beside the `X-Original-*` the proxy sets (and a
/// proxy that appends can carry two values of one). Two different originals are refused, not
/// counted as whichever the client chose: the request it names elsewhere is not let through
/// uncounted. Both conventions naming the same request are one request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_original_request_the_client_chose_is_refused_not_counted() {
    let redis = RedisServer::start();
    let gw = gateway(&redis, TRUSTED, "", "").await;
    let c = HttpClient::default();
    let client = ("x-forwarded-for", "198.51.100.9");
    let proxy = [
        ("x-original-method", "POST"),
        ("x-original-uri", "/api/otp/send"),
        client,
    ];
    for smuggled in [
        ("x-forwarded-uri", "/elsewhere"),
        ("x-forwarded-method", "GET"),
    ] {
        for _ in 0..4 {
            let mut h = proxy.to_vec();
            h.push(smuggled);
            let r = c.get(&url(&gw), &h).await;
            assert_eq!(
                (r.status.as_u16(), r.json()["error"].as_str()),
                (400, Some("ambiguous_original_request")),
                "{smuggled:?}"
            );
        }
    }
    let twice = c
        .get(
            &url(&gw),
            &[
                ("x-original-uri", "/api/otp/send"),
                ("x-original-uri", "/elsewhere"),
                ("x-original-method", "POST"),
                client,
            ],
        )
        .await;
    assert_eq!(twice.status, 400);
    // The same request under both names is that request, counted once each time.
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let mut h = proxy.to_vec();
        h.extend([
            ("x-forwarded-uri", "/api/otp/send"),
            ("x-forwarded-method", "POST"),
        ]);
        statuses.push(c.get(&url(&gw), &h).await.status.as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_peer_cannot_choose_the_client_ip() {
    let redis = RedisServer::start();
    let gw = gateway(&redis, "", "", "").await;
    let c = HttpClient::default();
    // Each request claims another client; the peer is not trusted, so all are the peer's.
    let mut statuses = Vec::new();
    for i in 0..4 {
        let ip = format!("203.0.113.{i}");
        let h = [
            ("x-forwarded-method", "POST"),
            ("x-forwarded-uri", "/api/otp/send"),
            ("x-forwarded-for", ip.as_str()),
        ];
        statuses.push(c.get(&url(&gw), &h).await.status.as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_counted_limit_counts_every_attempt_forward_auth_admits() {
    let redis = RedisServer::start();
    let login = r#"
[[routes]]
name = "login"
path = "/login"
key = ["header:x-user"]

  [[routes.limits]]
  name = "failures"
  limit = 2
  window = "1m"
  count_status = [401]
  reset_status = [200]
"#;
    let gw = gateway(&redis, TRUSTED, "", login).await;
    let c = HttpClient::default();
    let h = [("x-forwarded-uri", "/login"), ("x-user", "ann")];
    // The answer (here, the 200 forward auth gives) is never the login's: nothing is refunded
    // or reset, so the third attempt is refused.
    assert_eq!(c.get(&url(&gw), &h).await.status, 200);
    assert_eq!(c.get(&url(&gw), &h).await.status, 200);
    assert_eq!(c.get(&url(&gw), &h).await.status, 429);
}

/// A concurrency limit asked about through forward auth holds its slot only while the question
/// is answered (as `check` warns): the attempt itself goes on without slidegate, so a limit of
/// one lets one question after another through, and nothing stays in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_limit_through_forward_auth_bounds_only_the_questions_in_flight() {
    let redis = RedisServer::start();
    let inflight = r#"
[[routes]]
name = "chat"
path = "/chat"
key = ["header:x-user"]

  [[routes.limits]]
  name = "inflight"
  limit = 1
  algorithm = "concurrency"
"#;
    let gw = gateway(&redis, TRUSTED, "", inflight).await;
    let c = HttpClient::default();
    let h = [("x-forwarded-uri", "/chat"), ("x-user", "ann")];
    for _ in 0..3 {
        assert_eq!(c.get(&url(&gw), &h).await.status, 200);
    }
    let (k, v) = support::admin::auth();
    let usage = c
        .get(
            &gw.admin("/admin/usage?route=chat&limit=inflight&key=ann"),
            &[(k, &v)],
        )
        .await;
    assert_eq!(usage.json()["limits"][0]["in_flight"], 0, "{}", usage.body);
}

/// A proxy that asks over HTTP/2 may split the original's cookies into several fields: they
/// are one cookie key, as on the traffic path, not an ambiguous one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_cookie_fields_of_an_http2_subrequest_are_one_key() {
    let redis = RedisServer::start();
    let extra = r#"
[[routes]]
name = "session"
path = "/app/*"
key = ["header:cookie"]
  [[routes.limits]]
  name = "per-session"
  limit = 1
  window = "1m"
"#;
    let gw = gateway(&redis, "", "", extra).await;
    let h2 = HttpClient::http2();
    let ask = |cookies: &'static [(&'static str, &'static str)]| {
        let (h2, url) = (h2.clone(), url(&gw));
        async move {
            let mut headers = vec![("x-forwarded-method", "GET"), ("x-forwarded-uri", "/app/x")];
            headers.extend_from_slice(cookies);
            h2.get(&url, &headers).await
        }
    };
    let split = ask(&[("cookie", "sid=1"), ("cookie", "theme=dark")]).await;
    assert_eq!(split.status, 200, "{}", split.body);
    let joined = ask(&[("cookie", "sid=1; theme=dark")]).await;
    assert_eq!(joined.status, 429, "the same cookies: {}", joined.body);
}

/// A `header:host` key counts the host the client asked for: Caddy's and Traefik's subrequest
/// names it in `X-Forwarded-Host` (its own `Host` is the auth address), the last one being the
/// one the proxy set; NGINX's recipe sets `Host`, and a client's `X-Forwarded-Host` beside
/// `X-Original-URI` changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_key_counts_the_host_the_proxy_names() {
    let redis = RedisServer::start();
    let extra = r#"
[[routes]]
name = "tenant"
path = "/t/*"
key = ["header:host"]
  [[routes.limits]]
  name = "per-host"
  limit = 1
  window = "1m"
"#;
    let gw = gateway(&redis, "", "", extra).await;
    let c = HttpClient::default();
    let traefik = |host: &'static str| {
        let (c, url) = (c.clone(), url(&gw));
        async move {
            let h = [("x-forwarded-uri", "/t/x"), ("x-forwarded-host", host)];
            c.get(&url, &h).await.status
        }
    };
    assert_eq!(traefik("tenant-a.example").await, 200);
    assert_eq!(traefik("tenant-b.example").await, 200, "another tenant");
    assert_eq!(traefik("Tenant-A.example:80").await, 429, "one host");
    assert_eq!(traefik("dodge.example, tenant-b.example").await, 429);
    let nginx = |host: &'static str, forwarded: &'static str| {
        let (c, url) = (c.clone(), url(&gw));
        async move {
            let h = [
                ("x-original-uri", "/t/x"),
                ("host", host),
                ("x-forwarded-host", forwarded),
            ];
            c.get(&url, &h).await.status
        }
    };
    assert_eq!(nginx("tenant-c.example", "x.example").await, 200);
    assert_eq!(nginx("tenant-c.example", "y.example").await, 429);
}

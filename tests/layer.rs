//! `slidegate::RateLimitLayer` in front of someone else's service (SPEC section 10): an axum
//! `Router` served on a real loopback listener, built from TOML and with the builder, and a
//! plain `tower::service_fn` with a body type of its own, called with `oneshot`. The layer gives
//! the gateway's decisions, 429 bodies and headers (checked side by side with a real gateway
//! running the same routes), reads keys from a body the handler still receives byte for byte,
//! settles outcome-counted limits by the handler's status, counts everything in its metrics,
//! and lets requests no route takes through unlimited.

mod support;

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use http::Method;
use http_body_util::{BodyExt, Full};
use slidegate::config::{Config, Environment, Purpose};
use slidegate::layer::{ClientAddr, RequestBody, RouteBuilder};
use slidegate::RateLimitLayer;
use support::gateway;
use support::http::{HttpClient, Reply};
use support::problem::assert_problem;
use support::redis::RedisServer;
use support::{metrics, unique_prefix, upstream};

/// Serves `app` on 127.0.0.1:0 with the peer address as `ConnectInfo`; returns its address.
async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

fn layer_config(toml: &str) -> Config {
    Config::from_toml(
        std::path::Path::new("layer.toml"),
        toml,
        Environment::empty(),
        Purpose::Layer,
    )
    .unwrap_or_else(|e| panic!("layer config invalid: {e}\n{toml}"))
}

fn count(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    metrics::value(text, name, labels).unwrap_or(0.0)
}

fn decisions(text: &str, route: &str, decision: &str) -> f64 {
    count(
        text,
        "slidegate_requests_total",
        &[("route", route), ("decision", decision)],
    )
}

/// The routes both the layer and the gateway run: two limits on a header key, and a route
/// that only passes.
const ROUTES: &str = r#"
[[routes]]
name = "api"
path = "/api/*"
key = ["header:X-Key"]
  [[routes.limits]]
  name = "per-minute"
  limit = 3
  window = "1m"
  [[routes.limits]]
  name = "per-hour"
  limit = 5
  window = "1h"
"#;

/// What a client sees of an answer, less what differs between any two answers (the request
/// id, the exact wait, the seconds of `t=` that depend on when it was asked).
fn seen(r: &Reply) -> serde_json::Value {
    let header = |name: &str| r.header(name).map(str::to_string);
    let ratelimit = header("ratelimit").map(|v| v.split(";t=").next().unwrap().to_string());
    let body = if header("content-type").as_deref() == Some("application/problem+json") {
        let mut body = r.json();
        let object = body.as_object_mut().unwrap();
        object.remove("request_id");
        object.remove("retry_after_ms");
        body
    } else {
        serde_json::Value::Null
    };
    serde_json::json!({
        "status": r.status.as_u16(),
        "ratelimit-policy": header("ratelimit-policy"),
        "ratelimit": ratelimit,
        "x-ratelimit-limit": header("x-ratelimit-limit"),
        "x-ratelimit-remaining": header("x-ratelimit-remaining"),
        "has retry-after": header("retry-after").is_some(),
        "content-type": header("content-type").filter(|c| c.contains("problem")),
        "body": body,
    })
}

/// The same requests through a layer built from TOML and through a real gateway running the
/// same routes give the same statuses, 429 bodies and rate-limit headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_from_toml_answers_as_the_gateway_does() {
    let layer = RateLimitLayer::from_config(layer_config(&format!(
        "[store]\nbackend = \"memory\"\n{ROUTES}"
    )))
    .await
    .unwrap();
    let app = Router::new()
        .route("/api/{*rest}", get(|| async { "inner\n" }))
        .layer(layer.clone());
    let addr = serve(app).await;
    let up = upstream::start().await;
    let gw_routes = ROUTES.replace("key = [", "upstream = \"up\"\nkey = [");
    let gw = gateway::start(&gateway::config(
        "backend = \"memory\"",
        &up.url(),
        &gw_routes,
    ))
    .await;

    let client = HttpClient::default();
    let started = Instant::now();
    let mut answers = Vec::new();
    // key a: 3 pass, then per-minute refuses; key b: its own quota; no key: 400
    let requests = [
        ("a", 1),
        ("a", 2),
        ("a", 3),
        ("a", 4),
        ("a", 5),
        ("b", 6),
        ("", 7),
    ];
    for (key, n) in requests {
        let headers: Vec<(&str, &str)> = if key.is_empty() {
            vec![]
        } else {
            vec![("x-key", key)]
        };
        let from_layer = client
            .get(&format!("http://{addr}/api/x{n}"), &headers)
            .await;
        let from_gateway = client.get(&gw.url(&format!("/api/x{n}")), &headers).await;
        assert_eq!(
            seen(&from_layer),
            seen(&from_gateway),
            "request {n} ({key:?}):\nlayer: {from_layer:?}\ngateway: {from_gateway:?}"
        );
        answers.push(from_layer);
    }
    let elapsed_ms = started.elapsed().as_millis() as u64 + 1;
    let statuses: Vec<u16> = answers.iter().map(|r| r.status.as_u16()).collect();
    assert_eq!(statuses, [200, 200, 200, 429, 429, 200, 400]);
    assert_eq!(answers[0].body, "inner\n", "the handler answered");
    assert_eq!(
        answers[0].header("ratelimit-policy"),
        Some("\"per-minute\";q=3;w=60, \"per-hour\";q=5;w=3600")
    );
    let refused = assert_problem(&answers[3], 429, "rate_limited");
    assert_eq!(refused["route"], "api");
    assert_eq!(refused["limit"], "per-minute");
    let retry_ms = refused["retry_after_ms"].as_u64().unwrap();
    assert!(
        (60_000 - elapsed_ms..=60_000).contains(&retry_ms),
        "{refused}"
    );
    assert_eq!(
        answers[3].header("retry-after"),
        Some(retry_ms.div_ceil(1000).to_string().as_str())
    );
    assert_problem(&answers[6], 400, "missing_key");

    let m = layer.metrics().encode();
    assert_eq!(decisions(&m, "api", "allowed"), 4.0, "{m}");
    assert_eq!(decisions(&m, "api", "rejected"), 2.0);
    assert_eq!(decisions(&m, "api", "bad_request"), 1.0);
    assert_eq!(
        count(
            &m,
            "slidegate_limit_exceeded_total",
            &[
                ("route", "api"),
                ("limit", "per-minute"),
                ("mode", "enforced")
            ]
        ),
        2.0
    );
    gw.stop().await;
}

/// Built with the builder on a real Redis: a route keyed by a JSON member reads the body for its
/// key, and the handler still receives that body byte for byte; the counts land in Redis under
/// the layer's prefix; a shadow route lets everything through and counts what it would refuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_built_layer_keys_by_the_body_and_the_handler_gets_it_whole() {
    let redis = RedisServer::start_async().await;
    let prefix = unique_prefix("layer");
    let layer = RateLimitLayer::builder()
        .redis(&redis.url())
        .store("key_prefix", prefix.as_str())
        .route(
            RouteBuilder::new("send", "/send")
                .methods(&["POST"])
                .key(&["json:to.phone"])
                .limit("per-minute", 2, "1m"),
        )
        .route(
            RouteBuilder::new("watch", "/watch")
                .set("on_exceed", "shadow")
                .limit("per-minute", 1, "1m"),
        )
        .build()
        .await
        .unwrap();
    let received: Arc<Mutex<Vec<Bytes>>> = Arc::default();
    let log = received.clone();
    let app = Router::new()
        .route(
            "/send",
            post(move |body: Bytes| {
                let log = log.clone();
                async move {
                    log.lock().unwrap().push(body.clone());
                    body
                }
            }),
        )
        .route("/watch", get(|| async { "watched\n" }))
        .layer(layer.clone());
    let addr = serve(app).await;
    let client = HttpClient::default();
    let url = format!("http://{addr}/send");
    let body = "\u{feff}{ \"to\" : {\"phone\": \"+62 812\", \"note\": \"caf\u{e9} \\u00e9\"}, \"pad\": [1, 2.50, null] }";
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let r = client
            .send(
                Method::POST,
                &url,
                &[("content-type", "application/json")],
                body,
            )
            .await;
        statuses.push(r.status.as_u16());
        if r.status == 200 {
            assert_eq!(r.body, body, "echoed as received");
        } else {
            assert_problem(&r, 429, "rate_limited");
        }
    }
    assert_eq!(statuses, [200, 200, 429]);
    let got = received.lock().unwrap().clone();
    assert_eq!(
        got,
        vec![Bytes::from(body); 2],
        "the handler got the body byte for byte"
    );
    // the key `+62 812` (the member `to.phone`) holds a space, so Redis sees it hashed
    // (lua/README.md, "Key layout"): `#` and 16 bytes of its SHA-256 in hex
    let digest = <sha2::Sha256 as sha2::Digest>::digest(b"+62 812");
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    let set = format!("{prefix}:{{send|#{hex}}}#log");
    let keys = support::observe::keys(&redis, &prefix);
    assert_eq!(
        keys,
        std::slice::from_ref(&set),
        "one set, for the body's key"
    );
    assert_eq!(
        redis.cmd(&["ZCARD", &set]).int(),
        2,
        "the two allowed requests"
    );

    for _ in 0..3 {
        let r = client.get(&format!("http://{addr}/watch"), &[]).await;
        assert_eq!(r.status, 200, "shadow refuses nothing");
    }
    let m = layer.metrics().encode();
    assert_eq!(decisions(&m, "send", "allowed"), 2.0);
    assert_eq!(decisions(&m, "send", "rejected"), 1.0);
    assert_eq!(decisions(&m, "watch", "allowed"), 1.0);
    assert_eq!(decisions(&m, "watch", "shadow_rejected"), 2.0);
    assert_eq!(
        count(
            &m,
            "slidegate_limit_exceeded_total",
            &[
                ("route", "watch"),
                ("limit", "per-minute"),
                ("mode", "shadow")
            ]
        ),
        2.0
    );
}

/// `count_status` settles by the handler's own status: answers it does not list give their
/// reservation back (counted in `slidegate_outcome_refunds_total`), so a key with one counted
/// failure and any number of successes still has room; the second failure fills the limit and
/// the next attempt is refused without reaching the handler. A layer from a file does the same
/// as one from text, and a path no route takes passes through unlimited and uncounted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcome_counting_follows_the_handlers_status() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("layer.toml");
    std::fs::write(
        &path,
        r#"
[store]
backend = "memory"

[[routes]]
name = "login"
path = "/login"
key = ["json:user"]
  [[routes.limits]]
  name = "failures"
  limit = 2
  window = "1m"
  count_status = [401]
"#,
    )
    .unwrap();
    let layer = RateLimitLayer::from_file(&path).await.unwrap();
    let calls = Arc::new(Mutex::new(0u32));
    let counter = calls.clone();
    let app = Router::new()
        .route(
            "/login",
            post(move |body: Bytes| {
                let counter = counter.clone();
                async move {
                    *counter.lock().unwrap() += 1;
                    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    match json["password"].as_str() {
                        Some("right") => (StatusCode::OK, "welcome"),
                        _ => (StatusCode::UNAUTHORIZED, "no"),
                    }
                }
            }),
        )
        .route("/free", get(|| async { "free\n" }))
        .layer(layer.clone());
    let addr = serve(app).await;
    let client = HttpClient::default();
    let url = format!("http://{addr}/login");
    let attempt = |password: &'static str| {
        let client = client.clone();
        let url = url.clone();
        async move {
            let body = serde_json::json!({"user": "ann", "password": password}).to_string();
            client
                .send(
                    Method::POST,
                    &url,
                    &[("content-type", "application/json")],
                    &body,
                )
                .await
        }
    };
    let mut statuses = Vec::new();
    let mut remaining = Vec::new();
    for password in [
        "x", "right", "right", "right", "right", "right", "x", "right",
    ] {
        let r = attempt(password).await;
        statuses.push(r.status.as_u16());
        remaining.push(r.header("x-ratelimit-remaining").map(str::to_string));
    }
    assert_eq!(statuses, [401, 200, 200, 200, 200, 200, 401, 429]);
    let remaining: Vec<Option<&str>> = remaining.iter().map(Option::as_deref).collect();
    assert_eq!(
        remaining,
        [
            Some("1"),
            Some("1"),
            Some("1"),
            Some("1"),
            Some("1"),
            Some("1"),
            Some("0"),
            Some("0")
        ],
        "each answer's headers include its own charge or refund"
    );
    assert_eq!(
        *calls.lock().unwrap(),
        7,
        "the refused attempt never reached the handler"
    );
    let m = layer.metrics().encode();
    let labels = [("route", "login"), ("limit", "failures")];
    assert_eq!(
        count(&m, "slidegate_outcome_refunds_total", &labels),
        5.0,
        "{m}"
    );
    assert_eq!(decisions(&m, "login", "allowed"), 7.0);
    assert_eq!(decisions(&m, "login", "rejected"), 1.0);

    for _ in 0..30 {
        let r = client.get(&format!("http://{addr}/free"), &[]).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.body, "free\n");
        assert!(r.header("x-ratelimit-limit").is_none());
    }
    let after = layer.metrics().encode();
    let total = |text: &str| metrics::series(text, "slidegate_requests_total", &[]).sum::<f64>();
    assert_eq!(total(&after), total(&m), "unlimited paths are not counted");
}

/// The layer wraps any `Service<Request<RequestBody<B>>>`, not only axum's: a `tower::service_fn`
/// taking `http_body_util::Full<Bytes>` bodies, called with `oneshot`, the client's address
/// given as a `ClientAddr` extension (as a server that is not axum would set it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_wraps_a_plain_tower_service() {
    use tower::{Layer, ServiceExt};
    let layer = RateLimitLayer::builder()
        .memory()
        .route(RouteBuilder::new("ping", "/ping").limit("per-minute", 2, "1m"))
        .build()
        .await
        .unwrap();
    let seen: Arc<Mutex<Vec<(IpAddr, Bytes)>>> = Arc::default();
    let log = seen.clone();
    let inner = tower::service_fn(move |req: http::Request<RequestBody<Full<Bytes>>>| {
        let log = log.clone();
        async move {
            let route = req
                .extensions()
                .get::<slidegate::layer::MatchedRoute>()
                .map(|m| m.client_ip);
            let body = req.into_body().collect().await.unwrap().to_bytes();
            log.lock().unwrap().push((route.unwrap(), body));
            Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"pong"))))
        }
    });
    let service = layer.layer(inner);
    let call = |client: [u8; 4], n: u32| {
        let service = service.clone();
        async move {
            let mut req = http::Request::post("/ping")
                .body(Full::new(Bytes::from(format!("ping {n}"))))
                .unwrap();
            req.extensions_mut()
                .insert(ClientAddr(IpAddr::from(client)));
            let response = service.oneshot(req).await.unwrap();
            let status = response.status().as_u16();
            let limit = response
                .headers()
                .get("x-ratelimit-remaining")
                .map(|v| v.to_str().unwrap().to_string());
            let body = response.into_body().collect().await.unwrap().to_bytes();
            (status, limit, body)
        }
    };
    let one = [192, 0, 2, 1];
    let two = [192, 0, 2, 2];
    let mut answers = Vec::new();
    for (n, client) in [one, one, one, two].into_iter().enumerate() {
        answers.push(call(client, n as u32).await);
    }
    let statuses: Vec<(u16, Option<&str>)> =
        answers.iter().map(|(s, r, _)| (*s, r.as_deref())).collect();
    assert_eq!(
        statuses,
        [
            (200, Some("1")),
            (200, Some("0")),
            (429, Some("0")),
            (200, Some("1"))
        ],
        "each ClientAddr is its own key"
    );
    assert_eq!(answers[0].2, Bytes::from_static(b"pong"));
    let problem: serde_json::Value = serde_json::from_slice(&answers[2].2).unwrap();
    assert_eq!(
        (problem["error"].as_str(), problem["limit"].as_str()),
        (Some("rate_limited"), Some("per-minute"))
    );
    let seen = seen.lock().unwrap().clone();
    let expected: Vec<(IpAddr, Bytes)> = vec![
        (IpAddr::from(one), Bytes::from("ping 0")),
        (IpAddr::from(one), Bytes::from("ping 1")),
        (IpAddr::from(two), Bytes::from("ping 3")),
    ];
    assert_eq!(
        seen, expected,
        "the inner service got the allowed requests, bodies whole"
    );
    let m = layer.metrics().encode();
    assert_eq!(decisions(&m, "ping", "allowed"), 3.0);
    assert_eq!(decisions(&m, "ping", "rejected"), 1.0);
}

/// The headers of an answer include its own refund ("remaining 1"), so the refund must be in
/// force for the very next request: a client told it has room is not refused. One thread and
/// the memory store, so nothing but the order of the layer's own steps decides.
#[tokio::test(flavor = "current_thread")]
async fn a_refund_shown_in_the_headers_is_in_force_for_the_next_request() {
    use tower::{Layer, ServiceExt};
    let failures = toml::toml! {
        name = "failures"
        limit = 1
        window = "1m"
        count_status = [401]
    };
    let layer = RateLimitLayer::builder()
        .memory()
        .route(RouteBuilder::new("login", "/login").limit_table(failures))
        .build()
        .await
        .unwrap();
    let inner = tower::service_fn(|_req: http::Request<RequestBody<Full<Bytes>>>| async {
        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(
            b"welcome",
        ))))
    });
    let service = layer.layer(inner);
    let mut answers = Vec::new();
    for _ in 0..3 {
        let mut req = http::Request::post("/login")
            .body(Full::new(Bytes::new()))
            .unwrap();
        req.extensions_mut()
            .insert(ClientAddr(IpAddr::from([192, 0, 2, 9])));
        let response = service.clone().oneshot(req).await.unwrap();
        let remaining = response
            .headers()
            .get("x-ratelimit-remaining")
            .map(|v| v.to_str().unwrap().to_string());
        answers.push((response.status().as_u16(), remaining));
    }
    let answers: Vec<(u16, Option<&str>)> =
        answers.iter().map(|(s, r)| (*s, r.as_deref())).collect();
    assert_eq!(
        answers,
        [(200, Some("1")), (200, Some("1")), (200, Some("1"))],
        "every 200 was refunded before the next attempt was decided"
    );
}

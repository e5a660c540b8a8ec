//! Limits that count outcomes in `slidegate::RateLimitLayer` (README, "Embedding: the tower layer"): `count_status`
//! settles by the handler's own status, a refund shown in an answer's headers is in force for the
//! very next request, a path no route takes passes through unlimited and uncounted, and an
//! attempt whose client leaves after the handler got it is settled by the handler's status.

use crate::support;

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use http::Method;
use http_body_util::Full;
use slidegate::layer::{ClientAddr, RequestBody, RouteBuilder};
use slidegate::RateLimitLayer;
use support::http::HttpClient;
use support::layer::{count, decisions, serve};
use support::metrics;

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

/// Embedded, the layer keeps the gateway's rule for clients that leave: the app's handler got
/// the attempt, so it may act on it; the layer carries the handler's future to its end after
/// the client closed its socket and settles by the handler's status (a 401 stays counted, a 200
/// is refunded), rather than letting the handler be cancelled and the reservation refunded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_the_handler_got_counts_by_its_status_after_the_client_left() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::AsyncWriteExt;

    let layer = RateLimitLayer::builder()
        .memory()
        .route(
            RouteBuilder::new("login", "/login")
                .key(&["json:user"])
                .limit_table(toml::toml! {
                    name = "failures"
                    limit = 2
                    window = "1m"
                    count_status = [401]
                }),
        )
        .build()
        .await
        .unwrap();
    let (called, finished) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (c, f) = (called.clone(), finished.clone());
    let app = Router::new().route(
        "/login",
        post(move |body: Bytes| {
            let (c, f) = (c.clone(), f.clone());
            async move {
                c.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(150)).await;
                f.fetch_add(1, Ordering::SeqCst);
                let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
                match json["password"].as_str() {
                    Some("right") => (StatusCode::OK, "welcome"),
                    _ => (StatusCode::UNAUTHORIZED, "no"),
                }
            }
        }),
    );
    let addr = serve(Router::new().fallback_service(tower::Layer::layer(&layer, app))).await;
    // each attempt in turn, once the one before has ended (reservations in flight count)
    let leave = |password: &'static str| {
        let (called, finished) = (called.clone(), finished.clone());
        async move {
            for _ in 0..1000 {
                if finished.load(Ordering::SeqCst) == called.load(Ordering::SeqCst) {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            let before = called.load(Ordering::SeqCst);
            let body = format!("{{\"user\":\"ann\",\"password\":\"{password}\"}}");
            let request = format!(
                "POST /login HTTP/1.1\r\nHost: app\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream.write_all(request.as_bytes()).await.unwrap();
            for _ in 0..1000 {
                if called.load(Ordering::SeqCst) > before {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            assert!(called.load(Ordering::SeqCst) > before, "the handler got it");
        } // the client closes its socket
    };
    let labels = [("route", "login"), ("limit", "failures")];
    leave("right").await;
    leave("wrong").await;
    leave("wrong").await;
    for _ in 0..400 {
        if finished.load(Ordering::SeqCst) == 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(
        finished.load(Ordering::SeqCst),
        3,
        "the handlers ran to their end after their clients left"
    );
    // settled as each handler returned: the 200 refunded, the 401s kept
    let mut m = layer.metrics().encode();
    for _ in 0..200 {
        if count(&m, "slidegate_outcome_refunds_total", &labels) > 0.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        m = layer.metrics().encode();
    }
    assert_eq!(
        count(&m, "slidegate_outcome_refunds_total", &labels),
        1.0,
        "{m}"
    );
    let body = serde_json::json!({"user": "ann", "password": "right"}).to_string();
    let third = HttpClient::default()
        .send(
            Method::POST,
            &format!("http://{addr}/login"),
            &[("content-type", "application/json")],
            &body,
        )
        .await;
    assert_eq!(third.status, 429, "the two 401s stayed counted");
    assert_eq!(called.load(Ordering::SeqCst), 3);
}

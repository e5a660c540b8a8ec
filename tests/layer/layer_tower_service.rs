//! `slidegate::RateLimitLayer` wraps any `Service<Request<RequestBody<B>>>`, not only axum's
//! (README, "Embedding: the tower layer"): a plain `tower::service_fn` with a body type of its own, called with
//! `oneshot`, each client address given as a `ClientAddr` extension its own key.

use crate::support;

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use slidegate::layer::{ClientAddr, RequestBody, RouteBuilder};
use slidegate::RateLimitLayer;
use support::layer::decisions;

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

/// A handler whose future panics is dropped with its panic: the layer never polls it again
/// (an `async fn` polled after panicking panics anew, a hand-written future may misbehave),
/// and its reservation, dropped unsettled, stays counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_panics_is_never_polled_again() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower::{Layer, ServiceExt};
    let layer = RateLimitLayer::builder()
        .memory()
        .route(
            RouteBuilder::new("login", "/login").limit_table(toml::toml! {
                name = "failures"
                limit = 2
                window = "1m"
                count_status = [401]
            }),
        )
        .build()
        .await
        .unwrap();
    let polls = Arc::new(AtomicUsize::new(0));
    let counted = polls.clone();
    let inner = tower::service_fn(move |_: http::Request<RequestBody<Full<Bytes>>>| {
        let counted = counted.clone();
        std::future::poll_fn(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            panic!("the handler panics");
            #[allow(unreachable_code)]
            std::task::Poll::Ready(Ok::<_, Infallible>(http::Response::new(Full::new(
                Bytes::new(),
            ))))
        })
    });
    let service = layer.layer(inner);
    let request = http::Request::post("/login")
        .extension(ClientAddr("203.0.113.5".parse().unwrap()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let called = tokio::spawn(service.oneshot(request)).await;
    assert!(called.is_err_and(|e| e.is_panic()), "the handler's panic");
    // a task the layer would spawn to carry the call on runs at once on this runtime
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(polls.load(Ordering::SeqCst), 1, "polled once");
}

/// An embedded layer leaves the head's bounds to the server of the service it wraps (a layer
/// file cannot set them): a request with 150 header fields and a 40 KB query, which the
/// gateway's proxy listener answers 431, reaches the service, routed or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_layer_leaves_the_heads_bounds_to_the_service() {
    use tower::{Layer, ServiceExt};
    let layer = RateLimitLayer::builder()
        .memory()
        .route(RouteBuilder::new("ping", "/ping").limit("per-minute", 5, "1m"))
        .build()
        .await
        .unwrap();
    let inner = tower::service_fn(|_req: http::Request<RequestBody<Full<Bytes>>>| async {
        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"seen"))))
    });
    let service = layer.layer(inner);
    let query = "q=".to_string() + &"a".repeat(40_000);
    for path in ["/ping", "/elsewhere"] {
        let mut req = http::Request::get(format!("{path}?{query}"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        for i in 0..150 {
            let name = http::HeaderName::try_from(format!("x-field-{i}")).unwrap();
            req.headers_mut().insert(name, "v".parse().unwrap());
        }
        req.extensions_mut()
            .insert(ClientAddr(IpAddr::from([192, 0, 2, 9])));
        let response = service.clone().oneshot(req).await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, Bytes::from_static(b"seen"), "{path}");
    }
}

/// An embedded layer's app is its upstream: each answer the layer forwards counts in
/// `slidegate_upstream_requests_total` by its class, and in the duration histogram, as the
/// gateway counts its upstream's (a refusal the app never saw counts nothing there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_layers_app_answers_count_as_the_upstreams() {
    use tower::{Layer, ServiceExt};
    let layer = RateLimitLayer::builder()
        .memory()
        .route(RouteBuilder::new("app", "/*").limit("per-minute", 3, "1m"))
        .build()
        .await
        .unwrap();
    let inner = tower::service_fn(|req: http::Request<RequestBody<Full<Bytes>>>| async move {
        let status: u16 = req.uri().path()[1..].parse().unwrap();
        let mut response = http::Response::new(Full::new(Bytes::new()));
        *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
        Ok::<_, Infallible>(response)
    });
    let service = layer.layer(inner);
    for path in ["/200", "/404", "/500", "/200"] {
        let mut req = http::Request::get(path)
            .body(Full::new(Bytes::new()))
            .unwrap();
        req.extensions_mut()
            .insert(ClientAddr(IpAddr::from([192, 0, 2, 10])));
        service.clone().oneshot(req).await.unwrap();
    }
    let m = layer.metrics().encode();
    let upstream = |class: &str| {
        support::layer::count(
            &m,
            "slidegate_upstream_requests_total",
            &[("route", "app"), ("status", class)],
        )
    };
    assert_eq!(
        [upstream("2xx"), upstream("4xx"), upstream("5xx")],
        [1.0, 1.0, 1.0],
        "{m}"
    );
    assert_eq!(decisions(&m, "app", "rejected"), 1.0);
    let observed = support::layer::count(
        &m,
        "slidegate_upstream_duration_seconds_count",
        &[("route", "app")],
    );
    assert_eq!(observed, 3.0, "{m}");
}

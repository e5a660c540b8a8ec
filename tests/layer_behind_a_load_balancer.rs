//! An embedded `RateLimitLayer` behind a load balancer (README, "Embedding: the tower layer"): with the balancer's
//! address in the layer file's `[server] trusted_proxies`, each client is keyed by the address
//! the balancer forwards, not by the balancer; without it, the layer logs one warning naming
//! the setting the first time a private or loopback peer sends forwarding headers.

mod support;

use axum::routing::post;
use axum::{Extension, Router};
use slidegate::layer::{MatchedRoute, RouteBuilder};
use slidegate::RateLimitLayer;
use support::http::HttpClient;
use support::layer::{captured_logs, decisions, log_lines_with, serve, BEHIND_A_BALANCER};

/// The app behind the layer answers with the client IP the layer counted.
fn app(layer: &RateLimitLayer) -> Router {
    let routes = Router::new().route(
        "/otp/send",
        post(|Extension(m): Extension<MatchedRoute>| async move { m.client_ip.to_string() }),
    );
    Router::new().fallback_service(tower::Layer::layer(layer, routes))
}

/// 25 clients behind one load balancer (the loopback peer, trusted in the layer file), each
/// named by its own `X-Forwarded-For`: every one gets its own count of 1, so all 25 pass once
/// and each one's second attempt is refused; the app sees each client's own address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_behind_a_trusted_balancer_each_get_their_own_count() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.toml");
    std::fs::write(&path, BEHIND_A_BALANCER).unwrap();
    let layer = RateLimitLayer::from_file(&path).await.unwrap();
    let addr = serve(app(&layer)).await;
    let client = HttpClient::default();
    let url = format!("http://{addr}/otp/send");
    let send = |ip: String| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let forwarded = format!("{ip}, 127.0.0.1");
            client
                .send(
                    http::Method::POST,
                    &url,
                    &[("x-forwarded-for", forwarded.as_str())],
                    "",
                )
                .await
        }
    };
    let clients: Vec<String> = (1..=25).map(|n| format!("198.51.100.{n}")).collect();
    for ip in &clients {
        let r = send(ip.clone()).await;
        assert_eq!(r.status, 200, "{ip}: {}", r.body);
        assert_eq!(&r.body, ip, "the app sees the forwarded client");
    }
    for ip in &clients {
        assert_eq!(
            send(ip.clone()).await.status,
            429,
            "{ip}'s own second attempt"
        );
    }
    let m = layer.scrape();
    assert_eq!(decisions(&m, "otp", "allowed"), 25.0);
    assert_eq!(decisions(&m, "otp", "rejected"), 25.0);
}

/// A layer built with no trusted proxies, in front of a load balancer on a loopback address:
/// every client counts as the balancer, and the first request carrying `X-Forwarded-For` logs
/// one warning naming `server.trusted_proxies` and the peer; the next ones log nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_balancer_is_warned_about_once() {
    captured_logs();
    let layer = RateLimitLayer::builder()
        .memory()
        .route(
            RouteBuilder::new("otp", "/otp/send")
                .methods(&["POST"])
                .limit("per-ip", 3, "1h"),
        )
        .build()
        .await
        .unwrap();
    let addr = serve(app(&layer)).await;
    let client = HttpClient::default();
    let url = format!("http://{addr}/otp/send");
    let warning = "server.trusted_proxies does not list 127.0.0.1";
    // no forwarding header yet: nothing to warn about
    let r = client.send(http::Method::POST, &url, &[], "").await;
    assert_eq!(r.status, 200);
    assert_eq!(log_lines_with(warning), Vec::<String>::new());
    let mut statuses = Vec::new();
    for n in 1..=5 {
        let forwarded = format!("198.51.100.{n}");
        let r = client
            .send(
                http::Method::POST,
                &url,
                &[("x-forwarded-for", forwarded.as_str())],
                "",
            )
            .await;
        statuses.push(r.status.as_u16());
    }
    assert_eq!(
        statuses,
        [200, 200, 429, 429, 429],
        "all one client: the balancer"
    );
    let lines = log_lines_with(warning);
    assert_eq!(lines.len(), 1, "once per layer: {lines:?}");
    assert!(lines[0].contains("WARN"), "{}", lines[0]);
    assert!(lines[0].contains("x-forwarded-for"), "{}", lines[0]);
}

/// A layer logs its file's warnings when it is built, as the gateway does at start: here a
/// `json:` key on a GET-only route, at its FILE:LINE:COLUMN.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_logs_the_warnings_of_its_file() {
    captured_logs();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("warned.toml");
    let text = BEHIND_A_BALANCER.replace(
        "methods = [\"POST\"]",
        "methods = [\"GET\"]\nkey = [\"json:phone\"]",
    );
    std::fs::write(&path, &text).unwrap();
    let _layer = RateLimitLayer::from_file(&path).await.unwrap();
    let lines = log_lines_with("warned.toml:");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("routes[0].key[0]: `json:phone` reads the request body"),
        "{}",
        lines[0]
    );
}

/// A server that gives the layer no client address (axum served without connect info) makes
/// every client one `ip` key: the layer says so once, naming the fix, and counts them as one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_with_no_client_address_are_warned_about_once() {
    use tower::ServiceExt;
    captured_logs();
    let layer = RateLimitLayer::builder()
        .memory()
        .route(
            RouteBuilder::new("otp", "/otp/send")
                .methods(&["POST"])
                .limit("per-ip", 2, "1h"),
        )
        .build()
        .await
        .unwrap();
    let service = app(&layer);
    let warning = "no client address";
    let before = log_lines_with(warning).len();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let req = http::Request::post("/otp/send")
            .body(axum::body::Body::empty())
            .unwrap();
        let response = service.clone().oneshot(req).await.unwrap();
        seen.push(response.status().as_u16());
    }
    assert_eq!(seen, [200, 200, 429], "every client one key");
    let lines = log_lines_with(warning);
    assert_eq!(lines.len(), before + 1, "once per layer: {lines:?}");
    assert!(lines[before].contains("into_make_service_with_connect_info"));
}

/// Behind a trusted balancer, the layer keeps the balancer's `X-Request-Id`, as the gateway
/// does: a 429's body names it, so the refusal can be found in the balancer's logs. From a
/// peer no `trusted_proxies` lists, the id is the layer's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_balancers_request_id_names_the_refusal() {
    use slidegate::layer::ClientAddr;
    use tower::ServiceExt;
    let layer = RateLimitLayer::builder()
        .memory()
        .server("trusted_proxies", vec!["127.0.0.1/32"])
        .route(
            RouteBuilder::new("otp", "/otp/send")
                .methods(&["POST"])
                .limit("per-ip", 1, "1h"),
        )
        .build()
        .await
        .unwrap();
    let service = app(&layer);
    let refused_id = |peer: [u8; 4], id: &'static str| {
        let service = service.clone();
        async move {
            let mut last = None;
            for _ in 0..2 {
                let mut req = http::Request::post("/otp/send")
                    .header("x-request-id", id)
                    .header("x-forwarded-for", "198.51.100.40")
                    .body(axum::body::Body::empty())
                    .unwrap();
                req.extensions_mut()
                    .insert(ClientAddr(std::net::IpAddr::from(peer)));
                last = Some(service.clone().oneshot(req).await.unwrap());
            }
            let response = last.unwrap();
            assert_eq!(response.status(), 429);
            let body = axum::body::to_bytes(response.into_body(), 1 << 20)
                .await
                .unwrap();
            let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
            problem["request_id"].as_str().unwrap().to_string()
        }
    };
    assert_eq!(refused_id([127, 0, 0, 1], "lb-7f3a").await, "lb-7f3a");
    assert_ne!(
        refused_id([203, 0, 113, 5], "client-made").await,
        "client-made"
    );
}

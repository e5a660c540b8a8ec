//! `slidegate::RateLimitLayer` built from TOML in front of an axum `Router` served on a real
//! loopback listener (README, "Embedding: the tower layer") gives the gateway's decisions, 429 bodies and headers,
//! checked side by side with a real gateway running the same routes, and counts them in its
//! metrics.

use crate::support;

use std::time::Instant;

use axum::routing::get;
use axum::Router;
use slidegate::config::{Config, Environment, Purpose};
use slidegate::RateLimitLayer;
use support::gateway;
use support::http::{HttpClient, Reply};
use support::layer::{count, decisions, serve};
use support::problem::assert_problem;
use support::upstream;

fn layer_config(toml: &str) -> Config {
    Config::from_toml(
        std::path::Path::new("layer.toml"),
        toml,
        Environment::empty(),
        Purpose::Layer,
    )
    .unwrap_or_else(|e| panic!("layer config invalid: {e}\n{toml}"))
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

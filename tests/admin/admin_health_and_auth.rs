//! The admin listener's health, readiness and metrics names; its bearer-token auth (a 401
//! without the token, whatever the path under `/admin` or `/v1`, and a 403 when no token is
//! configured); and `/admin/config`, laid out as the file is with defaults filled in and the token
//! redacted.

use crate::support;

use http::Method;
use support::admin::{auth, ROUTES};
use support::gateway::{self, config, redis_store, TOKEN};
use support::http::HttpClient;
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_metrics_and_auth() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let gw = gateway::start(&config(
        &redis_store(&redis.url(), &unique_prefix("adm")),
        &up.url(),
        ROUTES,
    ))
    .await;
    let client = HttpClient::default();
    assert_eq!(client.status(&gw.admin("/healthz"), &[]).await, 200);
    assert_eq!(client.status(&gw.admin("/readyz"), &[]).await, 200);
    client.get(&gw.url("/x"), &[("x-user", "u1")]).await;
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    for name in [
        "slidegate_requests_total",
        "slidegate_limit_exceeded_total",
        "slidegate_limit_utilization_ratio_bucket",
        "slidegate_decision_duration_seconds_bucket",
        "slidegate_store_errors_total",
        "slidegate_deny_cache_hits_total",
        "slidegate_upstream_requests_total",
        "slidegate_upstream_duration_seconds_bucket",
        "slidegate_config_reloads_total",
    ] {
        assert!(metrics.contains(name), "{name} missing from /metrics");
    }
    assert!(metrics.contains(
        "slidegate_decision_duration_seconds_count{backend=\"redis\",route=\"campaign-email\"} 1"
    ));
    assert!(!metrics.contains("u1"), "no label per client key");

    let no_token = client.get(&gw.admin("/admin/config"), &[]).await;
    assert_eq!(no_token.status, 401);
    let wrong = client
        .get(
            &gw.admin("/admin/config"),
            &[("authorization", "Bearer nope")],
        )
        .await;
    assert_eq!(wrong.status, 401);
    // Without the token, a path under /admin or /v1 that does not exist, or a method an
    // endpoint does not take, is a 401 like any other: nothing tells them apart.
    for (method, path) in [
        (Method::GET, "/admin/nope"),
        (Method::GET, "/admin"),
        (Method::GET, "/v1/decisions"),
        (Method::POST, "/v1/nope"),
    ] {
        let r = client.send(method.clone(), &gw.admin(path), &[], "").await;
        assert_eq!(r.status, 401, "{method} {path}");
        assert_eq!(r.json()["error"], "unauthorized", "{method} {path}");
        // the methods an endpoint takes are not told either
        assert_eq!(r.header("allow"), None, "{method} {path}");
    }
    let (k, v) = auth();
    for (method, path, status) in [
        (Method::GET, "/admin/nope", 404),
        (Method::GET, "/v1/decisions", 405),
    ] {
        let r = client
            .send(method.clone(), &gw.admin(path), &[(k, &v)], "")
            .await;
        assert_eq!(r.status, status, "{method} {path} with the token");
    }
    // Outside /admin and /v1 nothing needs it.
    assert_eq!(client.status(&gw.admin("/nope"), &[]).await, 404);
    assert_eq!(client.status(&gw.admin("/administrator"), &[]).await, 404);
    let shown = client.get(&gw.admin("/admin/config"), &[(k, &v)]).await;
    assert_eq!(shown.status, 200);
    assert!(!shown.body.contains(TOKEN), "the token is redacted");
    // laid out as the file is, defaults filled in
    let route = &shown.json()["routes"][0];
    assert_eq!(route["name"], "campaign-email");
    assert_eq!(route["on_exceed"], "reject");
    assert_eq!(route["on_missing_key"], "reject");
    assert_eq!(route["headers"], true);
    assert_eq!(route["limits"][1]["name"], "per-week");
    assert_eq!(route["limits"][1]["window"], "7d");
    assert_eq!(route["limits"][1]["algorithm"], "sliding_log");
    // every store setting, defaults included
    let store = &shown.json()["store"];
    for setting in [
        "backend",
        "url",
        "timeout",
        "on_error",
        "max_keys",
        "key_prefix",
    ] {
        assert!(!store[setting].is_null(), "store.{setting}: {store}");
    }
    assert_eq!(store["clock"], "redis", "{store}");
    assert_eq!(store["scripts"], "auto", "{store}");
    assert_eq!(store["replica_acks"], 0, "{store}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_configured_token_admin_answers_403() {
    let up = upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, config("backend = \"memory\"", &up.url(), ROUTES)).unwrap();
    let cfg = slidegate::config::Config::load_with_env(&path, |_: &str| None).unwrap();
    let running = slidegate::app::start(cfg).await.unwrap();
    let client = HttpClient::default();
    let r = client
        .get(
            &format!("http://{}/admin/config", running.admin_addr),
            &[("authorization", "Bearer x")],
        )
        .await;
    assert_eq!(r.status, 403);
    assert!(r.json()["detail"]
        .as_str()
        .unwrap()
        .contains("SLIDEGATE_ADMIN_TOKEN"));
    running.shutdown().await;
}

/// `/admin/config` writes durations as the file may (what it shows can be pasted back) and
/// fills in a gcra limit's burst (the limit when unset), leaving it out where it means nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_config_shows_what_a_file_may_say() {
    let up = upstream::start().await;
    let routes = r#"
[[routes]]
name = "paced"
path = "/*"
upstream = "up"
  [[routes.limits]]
  name = "smooth"
  limit = 30
  window = "1h30m"
  algorithm = "gcra"
  [[routes.limits]]
  name = "daily"
  limit = 100
  window = "1d"
"#;
    let gw = gateway::start(&config("backend = \"memory\"", &up.url(), routes)).await;
    let (k, v) = auth();
    let shown = HttpClient::default()
        .get(&gw.admin("/admin/config"), &[(k, &v)])
        .await
        .json();
    let limits = &shown["routes"][0]["limits"];
    assert_eq!(limits[0]["window"], "1h30m");
    assert_eq!(limits[0]["burst"], 30, "{limits}");
    assert_eq!(limits[1]["window"], "1d");
    assert!(limits[1]["burst"].is_null(), "{limits}");
    gw.stop().await;
}

/// The token from the environment is read trimmed, as the header's is: a secret written with a
/// trailing newline still lets its holder in; a blank one is no token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_token_is_read_trimmed() {
    let up = upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, config("backend = \"memory\"", &up.url(), ROUTES)).unwrap();
    let client = HttpClient::default();
    for (value, status) in [("s3cret\n", 200), (" \n", 403)] {
        let env = |name: &str| (name == "SLIDEGATE_ADMIN_TOKEN").then(|| value.to_string());
        let cfg = slidegate::config::Config::load_with_env(&path, env).unwrap();
        let running = slidegate::app::start(cfg).await.unwrap();
        let url = format!("http://{}/admin/config", running.admin_addr);
        let r = client
            .get(&url, &[("authorization", "Bearer s3cret")])
            .await;
        assert_eq!(r.status, status, "{value:?}: {}", r.body);
        running.shutdown().await;
    }
}

//! The admin listener: health, readiness, metrics names, bearer-token auth, usage and reset,
//! reload (good and bad files), and the batch decision API.

mod support;

use http::Method;
use support::gateway::{self, config, redis_store, TOKEN};
use support::http::HttpClient;
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

const ROUTES: &str = r#"
[[routes]]
name = "campaign-email"
path = "/*"
upstream = "up"
key = ["header:X-User"]
  [[routes.limits]]
  name = "per-day"
  limit = 2
  window = "1d"
  [[routes.limits]]
  name = "per-week"
  limit = 5
  window = "7d"
"#;

fn auth() -> (&'static str, String) {
    ("authorization", format!("Bearer {TOKEN}"))
}

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
    assert_eq!(route["limits"][1]["window"], "7days");
    assert_eq!(route["limits"][1]["algorithm"], "sliding_log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_configured_token_admin_answers_403() {
    let up = upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, config("backend = \"memory\"", &up.url(), ROUTES)).unwrap();
    let cfg = slidegate::config::Config::load_with_env(&path, &|_| None).unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_shows_and_reset_clears_on_every_instance() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let cfg = config(
        &redis_store(&redis.url(), &unique_prefix("usage")),
        &up.url(),
        ROUTES,
    );
    let a = gateway::start(&cfg).await;
    let b = gateway::start(&cfg).await;
    let client = HttpClient::default();
    let user = [("x-user", "u7")];
    assert_eq!(client.status(&a.url("/send"), &user).await, 200);
    assert_eq!(client.status(&a.url("/send"), &user).await, 200);
    assert_eq!(
        client.status(&b.url("/send"), &user).await,
        429,
        "b fills its deny cache"
    );
    let (k, v) = auth();
    let usage = client
        .get(
            &a.admin("/admin/usage?route=campaign-email&key=u7"),
            &[(k, &v)],
        )
        .await
        .json();
    assert_eq!(usage["route"], "campaign-email");
    assert_eq!(usage["key"], "u7");
    assert_eq!(usage["blocked_ms"], 0);
    assert_eq!(usage["limits"][0]["name"], "per-day");
    assert_eq!(usage["limits"][0]["used"], 2);
    assert_eq!(usage["limits"][0]["remaining"], 0);
    assert_eq!(usage["limits"][1]["used"], 2);
    assert_eq!(usage["limits"][1]["limit"], 5);
    assert!(usage["limits"][0]["reset_ms"].as_u64().unwrap() > 86_000_000);

    let reset = client
        .send(
            Method::DELETE,
            &a.admin("/admin/usage?route=campaign-email&key=u7"),
            &[(k, &v)],
            "",
        )
        .await;
    assert_eq!(reset.status, 200);
    // b's deny cache is cleared through pub/sub within a second.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        let status = client.get(&b.url("/send"), &user).await.status;
        if status == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "reset did not reach instance b within 1 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_applies_good_files_and_refuses_bad_ones() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let store = redis_store(&redis.url(), &unique_prefix("reload"));
    let gw = gateway::start(&config(&store, &up.url(), ROUTES)).await;
    // A reload reads the process environment, as in production.
    std::env::set_var("SLIDEGATE_ADMIN_TOKEN", TOKEN);
    let client = HttpClient::default();
    let (k, v) = auth();
    let user = [("x-user", "u1")];
    client.get(&gw.url("/x"), &user).await;
    client.get(&gw.url("/x"), &user).await;
    assert_eq!(client.status(&gw.url("/x"), &user).await, 429);

    gw.rewrite(&config(
        &store,
        &up.url(),
        &ROUTES.replace("limit = 2", "limit = 3"),
    ));
    let r = client
        .send(Method::POST, &gw.admin("/admin/reload"), &[(k, &v)], "")
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        client.status(&gw.url("/x"), &user).await,
        200,
        "counts survive, the new limit applies"
    );
    assert_eq!(client.status(&gw.url("/x"), &user).await, 429);

    gw.rewrite("[[routes]]\nname = 1\n");
    let r = client
        .send(Method::POST, &gw.admin("/admin/reload"), &[(k, &v)], "")
        .await;
    assert_eq!(r.status, 422);
    assert!(
        r.json()["detail"]
            .as_str()
            .unwrap()
            .contains("config.toml:2:8"),
        "{}",
        r.body
    );
    assert_eq!(
        client.status(&gw.url("/x"), &[("x-user", "u2")]).await,
        200,
        "the running config stays"
    );
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert!(metrics.contains("slidegate_config_reloads_total{result=\"success\"} 1"));
    assert!(metrics.contains("slidegate_config_reloads_total{result=\"failure\"} 1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_decisions_decide_like_the_proxy_in_order() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let gw = gateway::start(&config(
        &redis_store(&redis.url(), &unique_prefix("batch")),
        &up.url(),
        ROUTES,
    ))
    .await;
    let client = HttpClient::default();
    let (k, v) = auth();
    let keys: Vec<String> = (0..3000).map(|i| format!("user-{i}")).collect();
    let body = serde_json::json!({"route": "campaign-email", "keys": keys, "cost": 1}).to_string();
    let first = client
        .send(Method::POST, &gw.admin("/v1/decisions"), &[(k, &v)], &body)
        .await
        .json();
    let results = first["results"].as_array().unwrap();
    assert_eq!(results.len(), 3000);
    assert_eq!(results[1234]["key"], "user-1234");
    assert!(results
        .iter()
        .all(|r| r["allowed"] == true && r["remaining"] == 1));
    client
        .send(Method::POST, &gw.admin("/v1/decisions"), &[(k, &v)], &body)
        .await;
    let third = client
        .send(Method::POST, &gw.admin("/v1/decisions"), &[(k, &v)], &body)
        .await
        .json();
    let r = &third["results"][0];
    assert_eq!(r["allowed"], false);
    assert!(r["retry_after_ms"].as_u64().unwrap() > 86_000_000);
    // The proxy path sees the same counts.
    assert_eq!(
        client.status(&gw.url("/x"), &[("x-user", "user-5")]).await,
        429
    );
    assert_eq!(
        client
            .status(&gw.url("/x"), &[("x-user", "user-new")])
            .await,
        200
    );

    // A costly batch call that does not fit must not make the proxy deny cheaper requests.
    let body = serde_json::json!({"route": "campaign-email", "keys": ["big-spender"], "cost": 3})
        .to_string();
    let big = client
        .send(Method::POST, &gw.admin("/v1/decisions"), &[(k, &v)], &body)
        .await
        .json();
    assert_eq!(big["results"][0]["allowed"], false);
    assert_eq!(
        client
            .status(&gw.url("/x"), &[("x-user", "big-spender")])
            .await,
        200
    );

    let too_many: Vec<String> = (0..10_001).map(|i| i.to_string()).collect();
    let body = serde_json::json!({"route": "campaign-email", "keys": too_many}).to_string();
    let r = client
        .send(Method::POST, &gw.admin("/v1/decisions"), &[(k, &v)], &body)
        .await;
    assert_eq!(r.status, 413);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let bad = client
        .send(
            Method::POST,
            &gw.admin("/v1/decisions"),
            &[(k, &v)],
            "{nope",
        )
        .await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["error"], "bad_request");
    // JSON that parses but does not fit the API is unprocessable
    for body in [
        r#"{"keys": ["a"]}"#,
        r#"{"route": "campaign-email", "keys": "a"}"#,
        r#"{"route": "campaign-email", "keys": ["a"], "cost": -1}"#,
        r#"{"route": "campaign-email", "keys": ["a"], "extra": 1}"#,
    ] {
        let r = client
            .send(Method::POST, &gw.admin("/v1/decisions"), &[(k, &v)], body)
            .await;
        assert_eq!(r.status, 422, "{body}: {}", r.body);
        assert_eq!(r.json()["error"], "invalid_body", "{body}");
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_changes_server_listen_names_it_as_pending_a_restart() {
    let up = upstream::start().await;
    let cfg = config("backend = \"memory\"", &up.url(), ROUTES);
    let gw = gateway::start(&cfg).await;
    // A reload reads the process environment, as in production.
    std::env::set_var("SLIDEGATE_ADMIN_TOKEN", TOKEN);
    let client = HttpClient::default();
    let (k, v) = auth();
    let reload = || {
        let (client, url, auth) = (client.clone(), gw.admin("/admin/reload"), v.clone());
        async move {
            let r = client
                .send(Method::POST, &url, &[("authorization", &auth)], "")
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
            r.json()
        }
    };
    let shown = |json: serde_json::Value| {
        (
            json["server"]["listen"].clone(),
            json["pending_restart"].clone(),
        )
    };

    let elsewhere = format!("127.0.0.1:{}", support::free_port());
    let moved = cfg.replacen(
        "listen = \"127.0.0.1:0\"",
        &format!("listen = \"{elsewhere}\""),
        1,
    );
    assert_ne!(moved, cfg);
    gw.rewrite(&moved);
    let pending = serde_json::json!([
        {"setting": "server.listen", "running": "127.0.0.1:0", "configured": elsewhere}
    ]);
    let answer = reload().await;
    assert_eq!(answer["result"], "success");
    assert_eq!(answer["pending_restart"], pending);
    let config = client
        .get(&gw.admin("/admin/config"), &[(k, &v)])
        .await
        .json();
    assert_eq!(shown(config), (serde_json::json!("127.0.0.1:0"), pending));
    // Still served where it runs; nothing listens where the file now says.
    assert_eq!(
        client.get(&gw.url("/x"), &[("x-user", "u1")]).await.status,
        200
    );
    assert!(tokio::net::TcpStream::connect(&elsewhere).await.is_err());

    // The drain's bound is handed to the listener at start: also pending.
    let graced = moved.replacen("[server]", "[server]\nshutdown_grace = \"3s\"", 1);
    assert_ne!(graced, moved);
    gw.rewrite(&graced);
    let pending = reload().await["pending_restart"].clone();
    let settings: Vec<&str> = pending
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["setting"].as_str().unwrap())
        .collect();
    assert_eq!(
        settings,
        ["server.listen", "server.shutdown_grace"],
        "{pending}"
    );
    assert_eq!(pending[1]["configured"], "3s");

    // Back to the running value: nothing is pending any more.
    gw.rewrite(&cfg);
    assert_eq!(reload().await["pending_restart"], serde_json::json!([]));
    let config = client
        .get(&gw.admin("/admin/config"), &[(k, &v)])
        .await
        .json();
    assert_eq!(
        shown(config),
        (serde_json::json!("127.0.0.1:0"), serde_json::json!([]))
    );
}

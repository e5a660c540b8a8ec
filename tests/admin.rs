//! The admin listener: health, readiness, metrics names, bearer-token auth, usage (per limit,
//! with the block level and what this instance's deny cache holds back) and reset, the keys a
//! route blocks now, reload (good and bad files), and the batch decision API (cost bounds, dry
//! runs, routes that count outcomes).

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
    assert_eq!(usage["block_level"], 0);
    assert_eq!(
        usage["deny_cached_ms"], 0,
        "a never refused u7: its deny cache holds nothing"
    );
    // b answers what its clients get: its deny cache holds u7 back for the day's wait.
    let on_b = client
        .get(
            &b.admin("/admin/usage?route=campaign-email&key=u7"),
            &[(k, &v)],
        )
        .await
        .json();
    let used = |u: &serde_json::Value| -> Vec<u64> {
        let limits = u["limits"].as_array().unwrap();
        limits.iter().map(|l| l["used"].as_u64().unwrap()).collect()
    };
    assert_eq!(used(&on_b), used(&usage), "one store: {on_b}");
    let held = on_b["deny_cached_ms"].as_u64().unwrap();
    assert!(
        (86_000_000..=86_400_000).contains(&held),
        "deny_cached_ms {held}: {on_b}"
    );
    // `limit=L` picks one limit.
    let one = client
        .get(
            &a.admin("/admin/usage?route=campaign-email&key=u7&limit=per-week"),
            &[(k, &v)],
        )
        .await
        .json();
    let names: Vec<&str> = one["limits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["per-week"], "{one}");
    assert_eq!(one["limits"][0]["used"], 2);
    let unknown = client
        .get(
            &a.admin("/admin/usage?route=campaign-email&key=u7&limit=per-year"),
            &[(k, &v)],
        )
        .await;
    assert_eq!(unknown.status, 400, "{}", unknown.body);
    assert!(
        unknown.json()["detail"]
            .as_str()
            .unwrap()
            .contains("per-year"),
        "{}",
        unknown.body
    );

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
    // A reload reads the file with the environment the gateway started with.
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
    let spender = [("x-user", "big-spender")];
    assert_eq!(client.status(&gw.url("/x"), &spender).await, 200);
    let body = serde_json::json!({"route": "campaign-email", "keys": ["big-spender"], "cost": 2})
        .to_string();
    let big = client
        .send(Method::POST, &gw.admin("/v1/decisions"), &[(k, &v)], &body)
        .await
        .json();
    assert_eq!(big["results"][0]["allowed"], false, "{big}");
    assert_eq!(client.status(&gw.url("/x"), &spender).await, 200);
    assert_eq!(client.status(&gw.url("/x"), &spender).await, 429);

    // `cost` is a whole number from 1 to the route's smallest limit (2): anything else is a 400
    // naming the field.
    for cost in [
        "0",
        "-1",
        "3",
        "1.5",
        "\"1\"",
        "9223372036854775808",
        "1e30",
    ] {
        let body = format!(r#"{{"route": "campaign-email", "keys": ["a"], "cost": {cost}}}"#);
        let r = client
            .send(Method::POST, &gw.admin("/v1/decisions"), &[(k, &v)], &body)
            .await;
        assert_eq!(r.status, 400, "cost {cost}: {}", r.body);
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        let problem = r.json();
        assert_eq!(problem["error"], "cost_out_of_range", "cost {cost}");
        assert_eq!(problem["field"], "cost", "cost {cost}");
    }
    let untouched = client
        .get(
            &gw.admin("/admin/usage?route=campaign-email&key=a"),
            &[(k, &v)],
        )
        .await
        .json();
    assert_eq!(
        untouched["limits"][0]["used"], 0,
        "refused calls charge nothing"
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

/// A dry run decides every key as the call would, and charges and counts nothing; a route whose
/// limits count outcomes cannot be decided here at all (there is no response to read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_dry_runs_charge_nothing_and_outcome_routes_are_refused() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let outcomes = r#"
[[routes]]
name = "login"
path = "/login"
upstream = "up"
key = ["header:X-User"]
  [[routes.limits]]
  name = "failures"
  limit = 5
  window = "15m"
  count_status = [401]
"#;
    let gw = gateway::start(&config(
        &redis_store(&redis.url(), &unique_prefix("dry")),
        &up.url(),
        &format!("{outcomes}{ROUTES}"),
    ))
    .await;
    let client = HttpClient::default();
    let (_, v) = auth();
    let decide = |body: serde_json::Value| {
        let (client, url, auth) = (client.clone(), gw.admin("/v1/decisions"), v.clone());
        async move {
            let r = client
                .send(
                    Method::POST,
                    &url,
                    &[("authorization", &auth)],
                    &body.to_string(),
                )
                .await;
            (r.status.as_u16(), r.json())
        }
    };
    let used = |key: &str| {
        let (client, url, auth) = (
            client.clone(),
            gw.admin(&format!("/admin/usage?route=campaign-email&key={key}")),
            v.clone(),
        );
        async move {
            let usage = client.get(&url, &[("authorization", &auth)]).await.json();
            usage["limits"][0]["used"].as_u64().unwrap()
        }
    };
    // After this call u1 has one unit of its two left, u2 none.
    let real = serde_json::json!({"route": "campaign-email", "keys": ["u1", "u2", "u2"]});
    let (status, _) = decide(real).await;
    assert_eq!(status, 200);
    // The preview answers what the same call would: u1 takes its last unit, u2 has none, u3
    // (fresh, listed three times) takes two and is then refused, each key seeing the charges of
    // the keys before it.
    let preview = serde_json::json!({
        "route": "campaign-email", "keys": ["u1", "u2", "u3", "u3", "u3"], "dry_run": true
    });
    let expected = [
        ("u1", true, 0),
        ("u2", false, 0),
        ("u3", true, 1),
        ("u3", true, 0),
        ("u3", false, 0),
    ];
    for _ in 0..3 {
        let (status, answer) = decide(preview.clone()).await;
        assert_eq!(status, 200, "{answer}");
        let results = answer["results"].as_array().unwrap();
        let got: Vec<(&str, bool, u64)> = results
            .iter()
            .map(|r| {
                let key = r["key"].as_str().unwrap();
                (key, r["allowed"] == true, r["remaining"].as_u64().unwrap())
            })
            .collect();
        assert_eq!(got, expected, "{answer}");
        assert!(
            results[1]["retry_after_ms"].as_u64().unwrap() > 86_000_000,
            "{answer}"
        );
    }
    assert_eq!(
        (used("u1").await, used("u2").await, used("u3").await),
        (1, 2, 0),
        "dry runs charged nothing"
    );
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    let decisions = support::observe::decisions(&metrics, "campaign-email");
    assert_eq!(
        (decisions[0], decisions[1]),
        (3, 0),
        "dry runs counted nothing: {decisions:?}"
    );
    // Nor did the preview's refusals feed the deny cache: u3 still has its two units.
    for _ in 0..2 {
        assert_eq!(client.status(&gw.url("/x"), &[("x-user", "u3")]).await, 200);
    }

    for dry_run in [false, true] {
        let (status, problem) = decide(serde_json::json!({
            "route": "login", "keys": ["u1"], "dry_run": dry_run
        }))
        .await;
        assert_eq!(status, 400, "{problem}");
        assert_eq!(problem["error"], "route_counts_outcomes", "{problem}");
        assert!(
            problem["detail"].as_str().unwrap().contains("login"),
            "{problem}"
        );
    }
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert_eq!(
        support::observe::decisions(&metrics, "login"),
        [0; 8],
        "a refused call decides nothing"
    );
}

/// A route that blocks a user for a minute once it sends a second request within a minute.
const BLOCKING: &str = r#"
[[routes]]
name = "login"
path = "/login"
upstream = "up"
key = ["header:X-User"]
on_exceed = "block"
block_for = "1m"
  [[routes.limits]]
  name = "per-minute"
  limit = 1
  window = "1m"
"#;

/// `GET /admin/blocked?route=R` lists the keys blocked now, newest first, with the limit that
/// blocked them, their level and the time left; `/admin/usage` shows the block and its level,
/// and `DELETE /admin/usage` lifts the block and clears the level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_keys_are_listed_and_a_reset_lifts_one() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let gw = gateway::start(&config(
        &redis_store(&redis.url(), &unique_prefix("blocked")),
        &up.url(),
        BLOCKING,
    ))
    .await;
    let client = HttpClient::default();
    let (k, v) = auth();
    let admin = |path: &str| {
        let (client, url, auth) = (client.clone(), gw.admin(path), v.clone());
        async move {
            let r = client.get(&url, &[("authorization", &auth)]).await;
            assert_eq!(r.status, 200, "{url}: {}", r.body);
            r.json()
        }
    };
    let listed = || async {
        let answer = admin("/admin/blocked?route=login").await;
        assert_eq!(answer["route"], "login");
        answer["blocked"].as_array().unwrap().clone()
    };
    assert_eq!(listed().await, Vec::<serde_json::Value>::new());
    for user in ["u1", "u2"] {
        let who = [("x-user", user)];
        assert_eq!(client.status(&gw.url("/login"), &who).await, 200);
        let refused = client.get(&gw.url("/login"), &who).await;
        assert_eq!(refused.status, 429);
        assert_eq!(refused.json()["block_level"], 1, "{}", refused.body);
    }
    // Blocks are noted for the listing as they start; wait (bounded) for the second.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let blocked = loop {
        let blocked = listed().await;
        if blocked.len() == 2 || std::time::Instant::now() > deadline {
            break blocked;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let keys: Vec<&str> = blocked.iter().map(|b| b["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["u2", "u1"], "newest first: {blocked:?}");
    for b in &blocked {
        assert_eq!(b["limit"], "per-minute", "{b}");
        assert_eq!(b["block_level"], 1, "{b}");
        let left = b["remaining_ms"].as_u64().unwrap();
        assert!((50_000..=60_000).contains(&left), "{b}");
    }
    let usage = admin("/admin/usage?route=login&key=u1").await;
    assert_eq!(usage["block_level"], 1, "{usage}");
    let blocked_ms = usage["blocked_ms"].as_u64().unwrap();
    assert!((50_000..=60_000).contains(&blocked_ms), "{usage}");

    let lifted = client
        .send(
            Method::DELETE,
            &gw.admin("/admin/usage?route=login&key=u1"),
            &[(k, &v)],
            "",
        )
        .await;
    assert_eq!(lifted.status, 200, "{}", lifted.body);
    let keys: Vec<String> = listed()
        .await
        .iter()
        .map(|b| b["key"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(keys, ["u2"], "u1's block is lifted");
    let usage = admin("/admin/usage?route=login&key=u1").await;
    assert_eq!(
        (&usage["blocked_ms"], &usage["block_level"]),
        (&serde_json::json!(0), &serde_json::json!(0)),
        "{usage}"
    );
    assert_eq!(
        client.status(&gw.url("/login"), &[("x-user", "u1")]).await,
        200
    );
    assert_eq!(
        client.status(&gw.url("/login"), &[("x-user", "u2")]).await,
        429,
        "u2 stays blocked"
    );

    let no_route = client.get(&gw.admin("/admin/blocked"), &[(k, &v)]).await;
    assert_eq!(no_route.status, 400, "{}", no_route.body);
    let unknown = client
        .get(&gw.admin("/admin/blocked?route=nope"), &[(k, &v)])
        .await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert_eq!(unknown.json()["error"], "unknown_route");
}

/// A key longer than 64 bytes is shown hashed (`#` and 32 hex digits) by `/admin/blocked`, as in
/// the logs; that shown key is what `/admin/usage` takes, so the operator can lift the block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_key_listed_hashed_is_lifted_by_the_key_shown() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let gw = gateway::start(&config(
        &redis_store(&redis.url(), &unique_prefix("hashed")),
        &up.url(),
        BLOCKING,
    ))
    .await;
    let client = HttpClient::default();
    let (k, v) = auth();
    let long = "u".repeat(100);
    let who = [("x-user", long.as_str())];
    assert_eq!(client.status(&gw.url("/login"), &who).await, 200);
    assert_eq!(client.status(&gw.url("/login"), &who).await, 429);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let shown = loop {
        let answer = client
            .get(&gw.admin("/admin/blocked?route=login"), &[(k, &v)])
            .await
            .json();
        if let Some(key) = answer["blocked"][0]["key"].as_str() {
            break key.to_string();
        }
        assert!(std::time::Instant::now() < deadline, "{answer}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(
        shown.len() == 33
            && shown.starts_with('#')
            && shown[1..].bytes().all(|b| b.is_ascii_hexdigit()),
        "a long key is listed hashed: {shown}"
    );
    assert!(!shown.contains(&long));
    let escaped = shown.replace('#', "%23");
    let usage = client
        .get(
            &gw.admin(&format!("/admin/usage?route=login&key={escaped}")),
            &[(k, &v)],
        )
        .await
        .json();
    assert_eq!(usage["block_level"], 1, "usage of the key shown: {usage}");
    let lifted = client
        .send(
            Method::DELETE,
            &gw.admin(&format!("/admin/usage?route=login&key={escaped}")),
            &[(k, &v)],
            "",
        )
        .await;
    assert_eq!(lifted.status, 200, "{}", lifted.body);
    assert_eq!(
        client.status(&gw.url("/login"), &who).await,
        200,
        "the block was lifted by the key /admin/blocked showed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_changes_server_listen_names_it_as_pending_a_restart() {
    let up = upstream::start().await;
    let cfg = config("backend = \"memory\"", &up.url(), ROUTES);
    let gw = gateway::start(&cfg).await;
    // A reload reads the file with the environment the gateway started with.
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

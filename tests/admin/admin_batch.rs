//! The batch decision API, `POST /v1/decisions`: it decides like the proxy, in order, within its
//! cost bounds, and refuses bodies that do not fit; a dry run decides as the call would and charges
//! and counts nothing; and a route whose limits count outcomes is refused.

use crate::support;

use http::Method;
use support::admin::{auth, ROUTES};
use support::gateway::{self, config, redis_store};
use support::http::HttpClient;
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

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
        "1e400",
        "-1e400",
        "null",
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

    // an empty key is one the traffic path never derives (an empty key part is missing there)
    let body = r#"{"route": "campaign-email", "keys": ["a", ""]}"#;
    let r = client
        .send(Method::POST, &gw.admin("/v1/decisions"), &[(k, &v)], body)
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let problem = r.json();
    assert_eq!(problem["error"], "missing_key", "{problem}");
    assert_eq!(problem["field"], "keys[1]", "{problem}");

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
    // Nor measured anything: the three keys of the real call only.
    let observed = |name: &str| {
        support::metrics::value(
            &metrics,
            name,
            &[("route", "campaign-email"), ("backend", "redis")],
        )
        .unwrap_or(0.0)
    };
    assert_eq!(
        observed("slidegate_decision_duration_seconds_count"),
        3.0,
        "a dry run's decisions were measured: {metrics}"
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

/// A key on no plan, where `[plans] unknown = "reject"`, is refused with no wait to retry at
/// (`retry_after_ms: null`): no wait lets it in, as the proxy path's 403 has no `Retry-After`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_on_no_plan_has_no_wait_to_retry_at() {
    let routes = r#"
[plans]
members_file = "plans.toml"
unknown = "reject"

[[routes]]
name = "api"
path = "/api/*"
upstream = "up"
key = ["header:x-api-key"]
  [[routes.limits]]
  name = "per-day"
  limit = 1
  window = "1d"
  [routes.limits.plans]
  gold = 3
"#;
    let toml = config("backend = \"memory\"", "http://127.0.0.1:9", routes);
    let plans = ("plans.toml", b"\"gold-key\" = \"gold\"\n".to_vec());
    let gw = gateway::start_with_files(&toml, &[plans]).await;
    let (k, v) = auth();
    let body = r#"{"route":"api","keys":["gold-key","stranger"]}"#;
    let answer = HttpClient::default()
        .send(Method::POST, &gw.admin("/v1/decisions"), &[(k, &v)], body)
        .await
        .json();
    let (known, stranger) = (&answer["results"][0], &answer["results"][1]);
    assert_eq!(known["allowed"], true, "{answer}");
    assert_eq!(known["retry_after_ms"], 0);
    assert_eq!(stranger["allowed"], false, "{answer}");
    assert_eq!(stranger["error"], "unknown_key");
    assert_eq!(stranger["decision"], "bad_request");
    assert!(stranger["retry_after_ms"].is_null(), "{answer}");
    gw.stop().await;
}

//! `/admin/usage` and its reset: usage per limit, with the block level and what this instance's
//! deny cache holds back, `limit=L` picking one limit; and a reset that clears the key on every
//! instance, the other instances' deny caches through pub/sub.

use crate::support;

use http::Method;
use support::admin::{auth, ROUTES};
use support::gateway::{self, config, redis_store};
use support::http::HttpClient;
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

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
    // b's deny cache is cleared through pub/sub (in milliseconds; the bound is for a loaded
    // machine).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let status = client.get(&b.url("/send"), &user).await.status;
        if status == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "reset did not reach instance b within 5 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// `DELETE` with `limit=L` lifts the key's block only when `L` started it: freeing another
/// limit's count leaves the block and its level (an escalated attacker is not demoted by an
/// operator freeing an unrelated quota); naming the limit that started it lifts both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_reset_lifts_only_the_block_that_limit_started() {
    let up = upstream::start().await;
    let routes = r#"
[[routes]]
name = "guarded"
path = "/*"
upstream = "up"
key = ["header:x-user"]
on_exceed = "block"
block_for = "1m"
  [[routes.limits]]
  name = "short"
  limit = 2
  window = "1m"
  [[routes.limits]]
  name = "other"
  limit = 5
  window = "1m"
  algorithm = "gcra"
"#;
    let gw = gateway::start(&config("backend = \"memory\"", &up.url(), routes)).await;
    let client = HttpClient::default();
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(client.status(&gw.url("/x"), &[("x-user", "ivy")]).await);
    }
    assert_eq!(statuses, [200, 200, 429]);
    let (k, v) = auth();
    let usage = || async {
        let url = gw.admin("/admin/usage?route=guarded&key=ivy");
        client.get(&url, &[(k, &v)]).await.json()
    };
    assert_eq!(usage().await["block_level"], 1);
    let (gw, client, v) = (&gw, &client, &v);
    let delete = |limit: &'static str| async move {
        let url = gw.admin(&format!("/admin/usage?route=guarded&key=ivy&limit={limit}"));
        client
            .send(Method::DELETE, &url, &[(k, v)], "")
            .await
            .json()
    };
    assert_eq!(
        delete("other").await["limits"],
        serde_json::json!(["other"])
    );
    let kept = usage().await;
    assert_eq!(
        kept["block_level"], 1,
        "another limit's reset lifts no block: {kept}"
    );
    assert!(kept["blocked_ms"].as_u64().unwrap() > 0, "{kept}");
    assert_eq!(
        delete("short").await["limits"],
        serde_json::json!(["short"])
    );
    let lifted = usage().await;
    assert_eq!(lifted["block_level"], 0, "{lifted}");
    assert_eq!(lifted["blocked_ms"], 0, "{lifted}");
    assert_eq!(
        client.status(&gw.url("/x"), &[("x-user", "ivy")]).await,
        200
    );
}

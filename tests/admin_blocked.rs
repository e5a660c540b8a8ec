//! `GET /admin/blocked`: the keys a route blocks now, newest first, with the limit that blocked
//! them, their level and the time left; a reset through `/admin/usage` lifts one, and a key longer
//! than 64 bytes is listed hashed, by the very key `/admin/usage` takes.

mod support;

use http::Method;
use support::admin::auth;
use support::gateway::{self, config, redis_store};
use support::http::HttpClient;
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

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

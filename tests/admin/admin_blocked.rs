//! `GET /admin/blocked`: the keys a route blocks now, newest first, with the limit that blocked
//! them, their level and the time left; a reset through `/admin/usage` lifts one, and a key longer
//! than 64 bytes is listed hashed, by the very key `/admin/usage` takes.

use crate::support;

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
        let left = b["retry_after_ms"].as_u64().unwrap();
        assert_eq!(b["reason"], "block", "{b}");
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

/// A route that blocks for 2 s a key that sends a second request within a 4 s window: after the
/// block, the window still refuses the key for about 2 s more.
const SHORT_BLOCK: &str = r#"
[[routes]]
name = "login"
path = "/login"
upstream = "up"
key = [{ part = "header:X-User", normalize = "lower" }]
on_exceed = "block"
block_for = "2s"
  [[routes.limits]]
  name = "per-4s"
  limit = 1
  window = "4s"
"#;

/// Who is refused now, across the end of a block: the key is listed with `"reason":"block"`
/// while its block lasts and with `"reason":"window"` after it, until its window lets it in,
/// each time with the wait a client is told (here the window's, which outlasts the block; the
/// 429 that started the block said the same); then it is gone from the list and let through.
/// `value=` asks about one key as a person types it. On Redis and on the memory store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_stays_listed_until_its_window_lets_it_in() {
    let redis = RedisServer::start();
    for store in [
        redis_store(&redis.url(), &unique_prefix("window")),
        "backend = \"memory\"".to_string(),
    ] {
        listed_across_the_end_of_a_block(&store).await;
    }
}

async fn listed_across_the_end_of_a_block(store: &str) {
    use std::time::{Duration, Instant};
    let up = upstream::start().await;
    let gw = gateway::start(&config(store, &up.url(), SHORT_BLOCK)).await;
    let client = HttpClient::default();
    let (k, v) = auth();
    let who = [("x-user", "Carol")];
    let before_allowed = Instant::now();
    assert_eq!(client.status(&gw.url("/login"), &who).await, 200);
    let after_allowed = Instant::now();
    let before_block = Instant::now();
    let refused = client.get(&gw.url("/login"), &who).await;
    let after_block = Instant::now();
    assert_eq!(refused.status, 429, "{}", refused.body);
    let told = refused.json()["retry_after_ms"].as_u64().unwrap();
    // the window (4 s from the allowed request) outlasts the block (2 s from the refusal)
    let window_end = (
        before_allowed + Duration::from_secs(4),
        after_allowed + Duration::from_secs(4),
    );
    let block_end = (
        before_block + Duration::from_secs(2),
        after_block + Duration::from_secs(2),
    );
    let ms = |d: Duration| d.as_millis() as i64;
    assert!(
        (ms(window_end.0 - after_block) - 20..=ms(window_end.1 - before_block) + 20)
            .contains(&(told as i64)),
        "the 429 that started the block tells the window's wait: {told}"
    );

    let slack = 60; // ms: rounding up, and Redis's clock read a moment apart from ours
    let (mut seen, mut listed_all) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let asked = Instant::now();
        let r = client
            .get(
                &gw.admin("/admin/blocked?route=login&value=CAROL"),
                &[(k, &v)],
            )
            .await;
        let answered = Instant::now();
        assert_eq!(r.status, 200, "{}", r.body);
        let answer = r.json();
        let Some(entry) = answer["blocked"].as_array().unwrap().first().cloned() else {
            assert!(
                answered + Duration::from_millis(slack as u64) >= window_end.0,
                "gone before the window let it in: {seen:?}"
            );
            break;
        };
        assert_eq!(entry["key"], "carol", "{entry}");
        assert_eq!(entry["limit"], "per-4s", "{entry}");
        assert_eq!(entry["block_level"], 1, "{entry}");
        let retry = entry["retry_after_ms"].as_u64().unwrap() as i64;
        let low = ms(window_end.0.saturating_duration_since(answered)) - slack;
        let high = ms(window_end.1.saturating_duration_since(asked)) + slack;
        assert!(
            (low..=high).contains(&retry),
            "retry_after_ms {retry} outside {low}..={high}: {entry} ({store}; asked {} ms after \
             the allowed request, {} ms after the refusal; seen {seen:?})",
            ms(asked - before_allowed),
            ms(asked - before_block),
        );
        let reason = entry["reason"].as_str().unwrap().to_string();
        if answered < block_end.0 {
            assert_eq!(reason, "block", "{entry}");
        } else if asked > block_end.1 + Duration::from_millis(slack as u64) {
            assert_eq!(reason, "window", "{entry}");
        }
        // the whole listing (from the route's refusal index, written as the block started) too
        let all = client
            .get(&gw.admin("/admin/blocked?route=login"), &[(k, &v)])
            .await
            .json();
        let all = all["blocked"].as_array().unwrap().clone();
        assert!(all.len() <= 1, "{all:?}");
        if let Some(listed) = all.first() {
            assert_eq!(listed["key"], "carol", "{listed}");
            listed_all.push(listed["reason"].as_str().unwrap().to_string());
        }
        seen.push(reason);
        assert!(
            Instant::now() < deadline,
            "still listed after 10 s: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen.contains(&"block".to_string()), "{seen:?}");
    assert!(
        seen.contains(&"window".to_string()),
        "listed after its block ended: {seen:?}"
    );
    assert!(
        listed_all.contains(&"window".to_string()),
        "the route's listing too: {listed_all:?}"
    );
    assert_eq!(
        client.status(&gw.url("/login"), &who).await,
        200,
        "let in once unlisted"
    );
    gw.stop().await;
}

/// The listing is newest first by when each key was refused, not by when its refusal ends: a
/// key refused a moment ago for 5 s comes before one refused earlier for a minute. On Redis
/// and on the memory store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_latest_refused_key_is_listed_first_though_it_ends_sooner() {
    const TWO_WINDOWS: &str = r#"
[[routes]]
name = "api"
path = "/api"
upstream = "up"
  [[routes.limits]]
  name = "long"
  key = ["header:X-Long"]
  limit = 1
  window = "1m"
  [[routes.limits]]
  name = "short"
  key = ["header:X-Short"]
  limit = 1
  window = "5s"
"#;
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let stores = [
        redis_store(&redis.url(), &unique_prefix("blocked-order")),
        "backend = \"memory\"".to_string(),
    ];
    for store in stores {
        let gw = gateway::start(&config(&store, &up.url(), TWO_WINDOWS)).await;
        let client = HttpClient::default();
        let send = |long: &str, short: &str| {
            let (client, url) = (client.clone(), gw.url("/api"));
            let headers = [("x-long", long.to_string()), ("x-short", short.to_string())];
            async move {
                let headers: Vec<(&str, &str)> =
                    headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
                client.get(&url, &headers).await
            }
        };
        assert_eq!(send("a", "s1").await.status, 200);
        // `a` is refused by the minute's window first, then `s1` by the 5 s window
        let first = send("a", "s2").await;
        assert_eq!(first.json()["limit"], "long", "{}", first.body);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let second = send("b", "s1").await;
        assert_eq!(second.json()["limit"], "short", "{}", second.body);
        let (_, token) = auth();
        let url = gw.admin("/admin/blocked?route=api");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let listed = loop {
            let r = client.get(&url, &[("authorization", &token)]).await;
            let blocked = r.json()["blocked"].as_array().unwrap().clone();
            if blocked.len() == 2 || std::time::Instant::now() > deadline {
                break blocked;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        let order: Vec<(&str, &str)> = listed
            .iter()
            .map(|b| (b["key"].as_str().unwrap(), b["limit"].as_str().unwrap()))
            .collect();
        assert_eq!(
            order,
            [("s1", "short"), ("a", "long")],
            "{store}: {listed:?}"
        );
        gw.stop().await;
    }
}

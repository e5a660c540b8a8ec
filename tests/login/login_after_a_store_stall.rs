//! Logins answered while the store stalled lock nobody out (real Redis, real sockets): Redis is
//! paused past `store.timeout`, so each attempt's decision call times out and `on_error =
//! "allow"` lets it through; the owner signs in five times. When Redis runs again it runs the
//! five calls it held and charges their reservations, which no status will ever settle (the
//! attempts were answered long ago). The gateway releases them behind the calls: the account
//! is left with nothing counted, and its owner's next failures are counted as anyone's.

use crate::support;

use std::time::Duration;

use support::gateway::Gateway;
use support::http::HttpClient;
use support::leaving::eventually;
use support::otp_login::{gateway_on, login_route, post, AuthUpstream};
use support::redis::RedisServer;

const LIMIT: &str = r#"limit = 5
window = "15m"
count_status = [401, 403]
reset_status = [200]"#;

fn login(user: &str, password: &str) -> String {
    serde_json::json!({ "username": user, "password": password }).to_string()
}

/// What `/admin/usage` counts for the account `user`.
async fn used(gw: &Gateway, user: &str) -> u64 {
    let auth = format!("Bearer {}", support::gateway::TOKEN);
    let path = format!("/admin/usage?route=login&key={user}&limit=failed-logins");
    let usage = HttpClient::default()
        .get(&gw.admin(&path), &[("authorization", &auth)])
        .await
        .json();
    usage["limits"][0]["used"].as_u64().expect("used")
}

/// A blocking login route of `limit`, keyed by the username as sent.
fn blocking_route(limit: &str) -> String {
    login_route(limit).replace(
        "key = [\"json:username\"]",
        "key = [\"json:username\"]\non_exceed = \"block\"\nblock_for = \"1m\"",
    )
}

/// POSTs a login of `user` with `password` to `gw`; the status.
async fn send(gw: &Gateway, user: &str, password: &str) -> http::StatusCode {
    let client = HttpClient::default();
    post(&client, &gw.url("/api/login"), &[], &login(user, password))
        .await
        .status
}

/// Five successful logins of `owner` at once while Redis is paused past `store.timeout` (each let
/// through by `on_error`), then Redis resumed, once it has run the five calls it held.
async fn five_logins_in_a_stall(gw: &Gateway, redis: &RedisServer, owner: &str) {
    assert_eq!(send(gw, owner, "right").await, 200, "the store answers");
    let calls_before = redis.decision_calls();
    redis.pause();
    // sent at once, so that every charge is made before any release reaches Redis: each call
    // times out (200 ms), on_error lets the attempt through, and it succeeds
    let logins = (0..5).map(|_| send(gw, owner, "right"));
    let statuses = futures_util::future::join_all(logins).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.resume();
    // Redis runs the calls it held: the first attempt's, then the four that queued behind it
    // (the gateway's one connection sends one call at a time), each charging its reservations;
    // the releases come after them on that connection
    eventually(|| async { (redis.decision_calls() >= calls_before + 2).then_some(()) }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_answered_while_the_store_stalled_leave_nothing_counted() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = gateway_on(&redis, &upstream, &blocking_route(LIMIT)).await;
    five_logins_in_a_stall(&gw, &redis, "owner").await;
    // the gateway's releases, behind the calls on the same connection, take them back
    eventually(|| async { (used(&gw, "owner").await == 0).then_some(()) }).await;

    // the owner's next five failures fit, and the sixth attempt is refused, as for anyone
    for n in 0..5 {
        assert_eq!(send(&gw, "owner", "guess").await, 401, "failure {n}");
    }
    assert_eq!(send(&gw, "owner", "guess").await, 429);
    assert_eq!(used(&gw, "owner").await, 5);
    gw.stop().await;
}

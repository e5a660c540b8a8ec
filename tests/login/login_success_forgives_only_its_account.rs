//! A success forgives only the account that succeeded (real Redis, real sockets): where the key
//! merges values (`email` drops `+tags`, `lower` folds case), the attacker's own account in a
//! merged spelling (`victim+attacker@example.com`, `Victim`) signs in between guesses at the
//! victim's password, and forgives nothing of the victim's failures: the victim's password is
//! guessed exactly 5 times, and the account is blocked. Its owner's own success still forgives
//! them.

use crate::support;

use support::http::HttpClient;
use support::otp_login::{gateway_on, post, AuthUpstream};
use support::recipes::{ip, post_as, Recipe};
use support::redis::RedisServer;

const EMAIL_LOGIN: &str = r#"
[[routes]]
name = "login"
path = "/api/login"
methods = ["POST"]
upstream = "up"
key = [{ part = "json:username", normalize = "email" }]
on_missing_key = "reject"
on_exceed = "block"
block_for = "1m"

  [[routes.limits]]
  name = "failed-logins"
  limit = 5
  window = "15m"
  count_status = [401, 403]
  reset_status = [200]
"#;

fn login(user: &str, password: &str) -> String {
    serde_json::json!({ "username": user, "password": password }).to_string()
}

/// How many times the upstream was asked to check `password`.
fn checks(upstream: &AuthUpstream, password: &str) -> usize {
    let needle = format!("\"password\":\"{password}\"");
    upstream
        .bodies("/api/login")
        .iter()
        .filter(|b| String::from_utf8_lossy(b).contains(&needle))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attackers_tagged_address_forgives_nothing_of_the_victims() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = gateway_on(&redis, &upstream, EMAIL_LOGIN).await;
    let client = HttpClient::default();
    let url = gw.url("/api/login");
    for round in 0..6 {
        for n in 0..4 {
            let from = format!("198.51.100.{}", round * 4 + n + 1);
            let guess = login("victim@example.com", "guess");
            post(&client, &url, &[("x-forwarded-for", &from)], &guess).await;
        }
        let own = login("victim+attacker@example.com", "right");
        let r = post(&client, &url, &[("x-forwarded-for", "203.0.113.9")], &own).await;
        assert!(r.status == 200 || r.status == 429, "{}", r.status);
    }
    assert_eq!(
        checks(&upstream, "guess"),
        5,
        "the victim's password guessed beyond the limit"
    );
    let auth = format!("Bearer {}", support::gateway::TOKEN);
    let usage = HttpClient::default()
        .get(
            &gw.admin("/admin/usage?route=login&key=victim@example.com"),
            &[("authorization", &auth)],
        )
        .await
        .json();
    assert!(usage["blocked_ms"].as_u64().unwrap_or(0) > 0, "{usage}");
    gw.stop().await;
}

/// The shipped recipe (`lower`): `Victim` signing in forgives nothing of `victim`; the owner
/// signing in as `victim` (before the account is blocked) forgives them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recipe_another_case_forgives_nothing_the_owner_does() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = Recipe::start("login.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let url = gw.url("/api/login");
    let mut n = 0;
    let mut send = |user: &str, password: &str| {
        n += 1;
        let (client, url, from, body) = (&client, url.clone(), ip(n), login(user, password));
        async move { post_as(client, &url, &from, &body).await.status.as_u16() }
    };
    // the owner: four failures, then a success, forgiven: four more failures fit
    for _ in 0..4 {
        assert_eq!(send("victim", "guess").await, 401);
    }
    assert_eq!(send("victim", "right").await, 200);
    for _ in 0..4 {
        assert_eq!(send("victim", "guess").await, 401);
    }
    // the attacker's own `Victim` signs in: the fifth failure fits, the sixth is refused
    assert_eq!(send("Victim", "right").await, 200);
    assert_eq!(send("victim", "guess").await, 401);
    assert_eq!(send("victim", "guess").await, 429);
    assert_eq!(checks(&upstream, "guess"), 9);
    gw.stop().await;
}

/// The quota left (`r` of `RateLimit`) on an answer.
fn left(reply: &support::http::Reply) -> u64 {
    let header = reply.header("ratelimit").expect("RateLimit header");
    let r = header.split(';').find_map(|p| p.trim().strip_prefix("r="));
    r.and_then(|r| r.parse().ok()).expect("r= in RateLimit")
}

/// The headers of a success tell what the store still counts: the attacker's own tagged address
/// signing in leaves the victim's three failures counted (r=2 of 5), not a full quota; the
/// owner's success then forgives them (r=5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_tells_the_quota_its_reset_left() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = gateway_on(&redis, &upstream, EMAIL_LOGIN).await;
    let client = HttpClient::default();
    let url = gw.url("/api/login");
    let send = |user: &'static str, password: &'static str| {
        let (client, url) = (client.clone(), url.clone());
        async move { post(&client, &url, &[], &login(user, password)).await }
    };
    for expected in [4, 3, 2] {
        let failed = send("victim@example.com", "guess").await;
        assert_eq!((failed.status.as_u16(), left(&failed)), (401, expected));
    }
    let attacker = send("victim+me@example.com", "right").await;
    assert_eq!(attacker.status, 200);
    assert_eq!(left(&attacker), 2, "the victim's failures still count");
    let owner = send("victim@example.com", "right").await;
    assert_eq!(owner.status, 200);
    assert_eq!(left(&owner), 5, "the owner's success forgives them");
    gw.stop().await;
}

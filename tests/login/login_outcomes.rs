//! A login route that counts outcomes (README, "Protecting OTP and login endpoints"), through the gateway over real sockets
//! with a real Redis: only failures count and a success forgives them; failures block the account
//! with escalating blocks whose level shows in the 429, `/admin/usage` and `/admin/blocked` and is
//! cleared by a reset; the quiet route's 429s keep `Retry-After` only; a reset answer's own
//! reservation counts as a refund too; a refund lifts a refusal the deny cache remembered, and an
//! answered attempt one that stood on attempts in flight.
//! (Clients that leave: `outcomes_client_leaves.rs`.)

use crate::support;

use std::time::Duration;

use http::Method;
use support::gateway::{Gateway, TOKEN};
use support::http::HttpClient;
use support::metrics::value;
use support::otp_login::{gateway_on, login_route, post, scrape, AuthUpstream};
use support::redis::RedisServer;

const LOGIN_ROUTE: &str = r#"
[[routes]]
name = "login"
path = "/api/login"
methods = ["POST"]
upstream = "up"
key = [{ part = "json:username", normalize = "lower" }]
on_exceed = "block"
block_for = "1m"
block_growth = 2
headers = false

  [[routes.limits]]
  name = "failed-logins"
  limit = 3
  window = "1m"
  count_status = [401, 403]
  reset_status = [200]
"#;

fn login(user: &str, password: &str) -> String {
    format!("{{\"username\":\"{user}\",\"password\":\"{password}\"}}")
}

async fn usage(gw: &Gateway, key: &str) -> serde_json::Value {
    gw.admin_json(&format!("/admin/usage?route=login&key={key}"))
        .await
}

/// Only failures count, a success forgives them, and three failures block the account with
/// escalating blocks whose level shows in the 429, in /admin/usage and /admin/blocked, and is
/// cleared by DELETE /admin/usage. The quiet route's 429s keep Retry-After only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_logins_block_escalating_and_successes_do_not_count() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = gateway_on(&redis, &upstream, LOGIN_ROUTE).await;
    let client = HttpClient::default();
    let url = gw.url("/api/login");
    // a user who logs in a lot is never locked out
    for _ in 0..10 {
        let r = post(&client, &url, &[], &login("Ann", "right")).await;
        assert_eq!(r.status, 200);
    }
    assert_eq!(usage(&gw, "ann").await["limits"][0]["used"], 0);
    // two failures, then a success forgives them
    for _ in 0..2 {
        assert_eq!(
            post(&client, &url, &[], &login("ann", "x")).await.status,
            401
        );
    }
    assert_eq!(usage(&gw, "ann").await["limits"][0]["used"], 2);
    assert_eq!(
        post(&client, &url, &[], &login("ann", "right"))
            .await
            .status,
        200
    );
    assert_eq!(usage(&gw, "ann").await["limits"][0]["used"], 0);
    // three failures; the fourth attempt is refused without reaching the upstream
    for _ in 0..3 {
        assert_eq!(
            post(&client, &url, &[], &login("ANN", "x")).await.status,
            401
        );
    }
    let sent = upstream.bodies("/api/login").len();
    let r = post(&client, &url, &[], &login("ann", "right")).await;
    assert_eq!(r.status, 429);
    assert_eq!(upstream.bodies("/api/login").len(), sent);
    assert_eq!(r.json()["block_level"], 1);
    assert!(r.header("retry-after").is_some());
    for quiet in ["ratelimit", "ratelimit-policy", "x-ratelimit-remaining"] {
        assert!(r.header(quiet).is_none(), "{quiet} on a quiet route's 429");
    }
    let u = usage(&gw, "ann").await;
    assert_eq!(u["block_level"], 1);
    assert!(u["blocked_ms"].as_u64().unwrap() > 0);
    let blocked = gw.admin_json("/admin/blocked?route=login").await;
    assert_eq!(blocked["blocked"][0]["key"], "ann");
    assert_eq!(blocked["blocked"][0]["limit"], "failed-logins");
    assert_eq!(blocked["blocked"][0]["block_level"], 1);
    // the reset lifts the block and forgets the level
    let auth = format!("Bearer {TOKEN}");
    let reset = client
        .send(
            Method::DELETE,
            &gw.admin("/admin/usage?route=login&key=ann"),
            &[("authorization", &auth)],
            "",
        )
        .await;
    assert_eq!(reset.status, 200);
    let u = usage(&gw, "ann").await;
    assert_eq!(
        (u["block_level"].as_u64(), u["blocked_ms"].as_u64()),
        (Some(0), Some(0))
    );
    let metrics = scrape(&gw).await;
    let started = value(
        &metrics,
        "slidegate_blocks_started_total",
        &[("route", "login"), ("limit", "failed-logins")],
    );
    assert_eq!(started, Some(1.0));
    let resets = value(
        &metrics,
        "slidegate_outcome_resets_total",
        &[("route", "login"), ("limit", "failed-logins")],
    );
    assert_eq!(
        resets,
        Some(11.0),
        "every success cleared the count (its own charge with it)"
    );
    let refunds = value(
        &metrics,
        "slidegate_outcome_refunds_total",
        &[("route", "login"), ("limit", "failed-logins")],
    );
    assert_eq!(
        refunds,
        Some(11.0),
        "a reset gives the success's own reservation back: a refund as well"
    );
    gw.stop().await;
}

/// A refund gives the room back on this instance at once: a key that was refused (and so held
/// by the deny cache) while its attempts were in flight is decided by the store again when they
/// come back uncounted, not refused until the cached wait runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_lifts_the_refusal_the_deny_cache_remembered() {
    let route = login_route("limit = 2\nwindow = \"1m\"\ncount_status = [401]");
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = gateway_on(&redis, &upstream, &route).await;
    let client = HttpClient::default();
    let url = gw.url("/api/login");
    let slow = gw.url("/api/login?ms=600");
    // two successful logins in flight hold both reservations...
    let in_flight: Vec<_> = (0..2)
        .map(|_| {
            let (client, slow) = (client.clone(), slow.clone());
            tokio::spawn(async move { post(&client, &slow, &[], &login("carol", "right")).await })
        })
        .collect();
    for _ in 0..100 {
        if upstream.bodies("/api/login").len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        upstream.bodies("/api/login").len(),
        2,
        "both attempts upstream"
    );
    // ...so a third is refused, and the deny cache remembers the refusal for most of a minute
    let refused = post(&client, &url, &[], &login("carol", "right")).await;
    assert_eq!(
        refused.status, 429,
        "no room while two attempts are in flight"
    );
    for attempt in in_flight {
        assert_eq!(attempt.await.unwrap().status, 200);
    }
    // both came back 200, not counted: refunded, so the key has its room again here
    let after = post(&client, &url, &[], &login("carol", "right")).await;
    assert_eq!(
        after.status, 200,
        "refunded attempts gave the room back, yet the deny cache still refused the key"
    );
    assert_eq!(upstream.bodies("/api/login").len(), 3);
    gw.stop().await;
}

/// A refusal that stood on attempts still in flight is listed by `/admin/blocked` with the wait
/// the client was told, and kept by the deny cache only until one of them is answered: the answered failures then block the account at its next attempt, not
/// once the cached refusal lapses (a client told to come back in 2 s would otherwise meet a
/// block it was not told about).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answered_attempt_ends_a_cached_refusal_in_flight() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let route = LOGIN_ROUTE.replace("limit = 3", "limit = 2");
    let gw = gateway_on(&redis, &upstream, &route).await;
    let client = HttpClient::default();
    let (slow, url) = (gw.url("/api/login?ms=600"), gw.url("/api/login"));
    let body = login("bob", "x");
    let in_flight = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let refused = post(&client, &url, &[], &body).await;
        // while the two are still in flight, the operator's list tells the same wait
        let listed = client
            .get(
                &gw.admin("/admin/blocked?route=login"),
                &[("authorization", &format!("Bearer {TOKEN}"))],
            )
            .await
            .json();
        (refused, listed)
    };
    let (a, b, (refused, listed)) = tokio::join!(
        post(&client, &slow, &[], &body),
        post(&client, &slow, &[], &body),
        in_flight
    );
    assert_eq!((a.status.as_u16(), b.status.as_u16()), (401, 401));
    assert_eq!(refused.status, 429, "two attempts in flight fill the limit");
    let told: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!(told <= 2, "at most the upstream's timeout: {told}");
    let entry = &listed["blocked"][0];
    assert_eq!(entry["key"], "bob", "{listed}");
    let wait = entry["retry_after_ms"].as_u64().unwrap();
    assert!(
        wait <= 2_000,
        "the list tells the client's wait, not the window's: {listed}"
    );
    // the two answers' confirmations reach the store within a call
    tokio::time::sleep(Duration::from_millis(100)).await;
    let next = post(&client, &url, &[], &body).await;
    assert_eq!(next.status, 429);
    assert_eq!(next.json()["block_level"], 1, "{}", next.body);
}

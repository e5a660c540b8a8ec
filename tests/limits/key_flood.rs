//! A flood of new keys makes the in-process store stricter, never open (README, "When the
//! in-process store is full" and "Security notes"): with `max_keys = 100` and 5 requests per
//! user, 150 users with fresh `X-User` values fill the table, and then 12 requests for `victim`
//! (a key the table does not hold) reach the upstream at most 5 times. The full table's
//! decisions count as `kind="full"`, none goes to `on_error`, and their 429s say
//! `"approximate": true`. The same attack on the `local` fallback, with the test's Redis killed,
//! and on an embedded layer.

use crate::support;

use support::gateway::{self, config, Gateway};
use support::http::HttpClient;
use support::metrics::value;
use support::redis::RedisServer;
use support::unique_prefix;
use support::upstream::{self, Upstream};

/// `store.max_keys` of both attacks.
const MAX_KEYS: usize = 100;
/// The limit per user.
const LIMIT: usize = 5;
/// Distinct users of the flood (more than the table holds).
const FLOOD: usize = 150;
/// Requests for the victim after the flood.
const VICTIM_TRIES: usize = 12;

fn routes(on_error: &str) -> String {
    format!(
        r#"
[[routes]]
name = "signup"
path = "/signup"
upstream = "up"
key = ["header:x-user"]
on_error = "{on_error}"
  [[routes.limits]]
  name = "per-hour"
  limit = {LIMIT}
  window = "1h"
"#
    )
}

/// What one attack did: victim requests that reached the upstream, flood requests that did, the
/// victim's last answer (status and body), and the metrics after it.
struct Attack {
    victim_reached: usize,
    flood_reached: usize,
    last_status: u16,
    last_body: serde_json::Value,
    metrics: String,
}

/// The attack of issue 32, as an attacker runs it against `gw` in front of `up`.
async fn attack(gw: &Gateway, up: &Upstream) -> Attack {
    let client = HttpClient::default();
    let url = |user: &str| gw.url(&format!("/signup?u={user}"));
    for i in 0..FLOOD {
        let user = format!("flood{i}");
        client.status(&url(&user), &[("x-user", &user)]).await;
    }
    let mut last = None;
    for _ in 0..VICTIM_TRIES {
        last = Some(client.get(&url("victim"), &[("x-user", "victim")]).await);
    }
    let last = last.expect("the victim asked");
    let seen = up.seen();
    let reached = |prefix: &str| seen.iter().filter(|s| s.contains(prefix)).count();
    let attack = Attack {
        victim_reached: reached("u=victim"),
        flood_reached: reached("u=flood"),
        last_status: last.status.as_u16(),
        last_body: serde_json::from_str(&last.body).unwrap_or_default(),
        metrics: client.get(&gw.admin("/metrics"), &[]).await.body,
    };
    eprintln!(
        "attack: {} of {VICTIM_TRIES} victim requests and {} of {FLOOD} flood requests reached the upstream",
        attack.victim_reached, attack.flood_reached
    );
    attack
}

/// What every run of the attack must show.
fn assert_held(attack: &Attack) {
    assert_eq!(attack.last_status, 429, "the victim's last try");
    assert!(
        attack.victim_reached <= LIMIT,
        "{} of {VICTIM_TRIES} victim requests reached the upstream",
        attack.victim_reached
    );
    assert!(attack.victim_reached >= 1, "the victim was never served");
    assert!(
        attack.flood_reached >= MAX_KEYS,
        "the users the table holds are served: {}",
        attack.flood_reached
    );
    assert_eq!(
        attack.last_body["approximate"], true,
        "{}",
        attack.last_body
    );
    let full = value(
        &attack.metrics,
        "slidegate_store_errors_total",
        &[("kind", "full")],
    )
    .unwrap_or(0.0);
    assert!(
        full >= (FLOOD - MAX_KEYS + 1) as f64,
        "kind=\"full\" counted {full}"
    );
    let opened = value(
        &attack.metrics,
        "slidegate_requests_total",
        &[("route", "signup"), ("decision", "store_error_allowed")],
    )
    .unwrap_or(0.0);
    assert_eq!(opened, 0.0, "a full table sent decisions to on_error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_flood_on_the_memory_store_opens_no_limit() {
    let up = upstream::start().await;
    let store = format!("backend = \"memory\"\nmax_keys = {MAX_KEYS}\non_error = \"allow\"");
    let gw = gateway::start(&config(&store, &up.url(), &routes("allow"))).await;
    let attack = attack(&gw, &up).await;
    assert_held(&attack);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_flood_on_the_local_fallback_opens_no_limit() {
    let mut redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"100ms\"\nkey_prefix = \"{}\"\nmax_keys = {MAX_KEYS}",
        redis.url(),
        unique_prefix("flood")
    );
    let gw = gateway::start(&config(&store, &up.url(), &routes("local"))).await;
    let client = HttpClient::default();
    let probe = client
        .status(&gw.url("/signup?u=probe"), &[("x-user", "probe")])
        .await;
    assert_eq!(probe, 200, "Redis decides before it is killed");
    redis.kill();
    let attack = attack(&gw, &up).await;
    assert_held(&attack);
    let local = value(
        &attack.metrics,
        "slidegate_store_errors_total",
        &[("kind", "connection")],
    )
    .unwrap_or(0.0)
        + value(
            &attack.metrics,
            "slidegate_store_errors_total",
            &[("kind", "timeout")],
        )
        .unwrap_or(0.0);
    assert!(local > 0.0, "Redis was down: the fallback decided");
    gw.stop().await;
}

/// The same attack on an embedded layer (its default memory store), called in process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_flood_on_the_embedded_layer_opens_no_limit() {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use axum::body::Bytes;
    use http_body_util::{BodyExt, Full};
    use slidegate::layer::{RequestBody, RouteBuilder};
    use tower::{Layer, ServiceExt};

    let layer = slidegate::RateLimitLayer::builder()
        .memory()
        .store("max_keys", MAX_KEYS as i64)
        .route(
            RouteBuilder::new("signup", "/signup")
                .key(&["header:x-user"])
                .limit("per-hour", LIMIT as i64, "1h"),
        )
        .build()
        .await
        .unwrap();
    let victim_reached = Arc::new(AtomicUsize::new(0));
    let counter = victim_reached.clone();
    let inner = tower::service_fn(move |req: http::Request<RequestBody<Full<Bytes>>>| {
        let counter = counter.clone();
        async move {
            if req.headers()["x-user"] == "victim" {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
        }
    });
    let service = layer.layer(inner);
    let call = |user: String| {
        let service = service.clone();
        async move {
            let req = http::Request::post("/signup")
                .header("x-user", user)
                .body(Full::new(Bytes::new()))
                .unwrap();
            let response = service.oneshot(req).await.unwrap();
            let status = response.status().as_u16();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            (status, body)
        }
    };
    for i in 0..FLOOD {
        call(format!("flood{i}")).await;
    }
    let mut last = (0, Bytes::new());
    for _ in 0..VICTIM_TRIES {
        last = call("victim".to_string()).await;
    }
    let reached = victim_reached.load(Ordering::Relaxed);
    eprintln!("embedded layer: {reached} of {VICTIM_TRIES} victim requests reached the service");
    assert!(
        (1..=LIMIT).contains(&reached),
        "{reached} reached the service"
    );
    assert_eq!(last.0, 429);
    let problem: serde_json::Value = serde_json::from_slice(&last.1).unwrap();
    assert_eq!(problem["approximate"], true, "{problem}");
    let metrics = layer.metrics().encode();
    let full = value(
        &metrics,
        "slidegate_store_errors_total",
        &[("kind", "full")],
    );
    assert!(full.unwrap_or(0.0) >= (FLOOD - MAX_KEYS) as f64, "{full:?}");
}

/// A login route beside the flood's, both on one full memory store: only failures count.
/// The route whose fresh keys fill the table, beside the route under test.
const FLOOD_ROUTE: &str = r#"
[[routes]]
name = "flood"
path = "/flood"
upstream = "up"
key = ["header:x-user"]
  [[routes.limits]]
  name = "per-hour"
  limit = 5
  window = "1h"
"#;

const LOGIN_BESIDE_FLOOD: &str = r#"
[[routes]]
name = "login"
path = "/api/login"
methods = ["POST"]
upstream = "up"
key = ["json:username"]
  [[routes.limits]]
  name = "failed-logins"
  limit = 5
  window = "15m"
  count_status = [401, 403]
  reset_status = [200]
"#;

/// Under a flood that filled the table, an account the table does not hold is counted in the
/// sketch, and what the answer gives back reaches the sketch too: a user who logs in often is
/// never locked out by successes (each reservation given back), while failures still count
/// there and refuse the sixth attempt, and `/admin/blocked` lists the account (a dry run in
/// the sketch). Without it, every admitted attempt stayed charged:
/// five successful logins locked the account for up to two windows, no failure needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_store_counts_only_failed_logins_too() {
    let up = support::auth::AuthUpstream::start().await;
    let store = format!("backend = \"memory\"\nmax_keys = {MAX_KEYS}");
    let gw = gateway::start(&config(
        &store,
        &up.url(),
        &format!("{FLOOD_ROUTE}{LOGIN_BESIDE_FLOOD}"),
    ))
    .await;
    let client = HttpClient::default();
    for i in 0..FLOOD {
        let user = format!("flood{i}");
        client.status(&gw.url("/flood"), &[("x-user", &user)]).await;
    }
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    let full = value(
        &metrics,
        "slidegate_store_errors_total",
        &[("kind", "full")],
    );
    assert!(full.unwrap_or(0.0) > 0.0, "the flood filled the table");

    let login = |password: &str| format!("{{\"username\":\"victim\",\"password\":\"{password}\"}}");
    let post = |body: String| {
        let client = client.clone();
        let url = gw.url("/api/login");
        async move {
            let headers = [("content-type", "application/json")];
            client.send(http::Method::POST, &url, &headers, &body).await
        }
    };
    for i in 0..10 {
        let r = post(login("right")).await;
        assert_eq!(r.status, 200, "success {i}: {}", r.body);
    }
    for i in 0..5 {
        let r = post(login("wrong")).await;
        assert_eq!(r.status, 401, "failure {i}: {}", r.body);
    }
    let r = post(login("right")).await;
    assert_eq!(r.status, 429, "five failures still count: {}", r.body);
    assert_eq!(r.json()["approximate"], true, "{}", r.body);
    // and the account is listed as refused, though the table does not hold it
    let (name, token) = support::admin::auth();
    let listing = client
        .get(&gw.admin("/admin/blocked?route=login"), &[(name, &token)])
        .await;
    assert_eq!(listing.status, 200, "{}", listing.body);
    let blocked = listing.json()["blocked"].clone();
    assert_eq!(blocked.as_array().map(Vec::len), Some(1), "{blocked}");
    assert_eq!(blocked[0]["limit"], "failed-logins", "{blocked}");
    assert_eq!(blocked[0]["reason"], "window", "{blocked}");
    gw.stop().await;
}

/// A blocking route beside a flood route: a key the table has no room for is blocked as one it
/// holds (its marker kept in the block sketch), for the whole `block_for`, and
/// `slidegate_blocks_started_total` counts both blocks.
const BLOCK_BESIDE_FLOOD: &str = r#"
[[routes]]
name = "otp"
path = "/otp"
upstream = "up"
key = ["header:x-phone"]
on_exceed = "block"
block_for = "10m"
  [[routes.limits]]
  name = "per-phone"
  limit = 2
  window = "1m"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_the_table_has_no_room_for_is_blocked_as_one_it_holds() {
    let up = upstream::start().await;
    let store = format!("backend = \"memory\"\nmax_keys = {MAX_KEYS}");
    let gw = gateway::start(&config(
        &store,
        &up.url(),
        &format!("{FLOOD_ROUTE}{BLOCK_BESIDE_FLOOD}"),
    ))
    .await;
    let client = HttpClient::default();
    let otp = |phone: &'static str| {
        let client = client.clone();
        let url = gw.url("/otp");
        async move { client.get(&url, &[("x-phone", phone)]).await }
    };
    let blocks_started = |metrics: &str| {
        value(
            metrics,
            "slidegate_blocks_started_total",
            &[("route", "otp"), ("limit", "per-phone")],
        )
        .unwrap_or(0.0)
    };
    // a key the table holds: its third attempt starts a block
    let statuses = [otp("held").await, otp("held").await, otp("held").await];
    assert_eq!(statuses.map(|r| r.status.as_u16()), [200, 200, 429]);
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert_eq!(blocks_started(&metrics), 1.0, "the held key's block");
    for i in 0..FLOOD {
        let user = format!("flood{i}");
        client.status(&gw.url("/flood"), &[("x-user", &user)]).await;
    }
    // a key the table does not hold: refused in the sketch, blocked there
    let statuses = [otp("newer").await, otp("newer").await, otp("newer").await];
    assert_eq!(
        statuses.each_ref().map(|r| r.status.as_u16()),
        [200, 200, 429]
    );
    assert_eq!(statuses[2].headers["retry-after"], "600", "the whole block");
    let refused = statuses[2].json();
    assert_eq!(refused["approximate"], true, "{refused}");
    assert_eq!(refused["block_level"], 1, "{refused}");
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert_eq!(blocks_started(&metrics), 2.0, "both keys' blocks");
    gw.stop().await;
}

//! Numbers and state a hostile client cannot abuse (README, "Which algorithm", "Configuration", "The traffic path" and "Admin listener"): the batch
//! API's `cost` is a whole number from 1 to the route's smallest limit (400
//! `cost_out_of_range` naming the field, on Redis and the memory store alike); the in-process
//! store never holds more than `store.max_keys` live keys, keeps exact counts for the keys it
//! holds and counts the others in its overflow sketch; and during a block, every instance answers the true wait.

use crate::support;

use std::time::Duration;

use http::Method;
use support::gateway::{self, config, Gateway, TOKEN};
use support::http::HttpClient;
use support::metrics::value;
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

const ROUTE: &str = r#"
[[routes]]
name = "campaign"
path = "/campaign"
upstream = "up"
key = ["header:x-user"]
  [[routes.limits]]
  name = "per-day"
  limit = 5
  window = "1d"
"#;

async fn batch(gw: &Gateway, body: &str) -> support::http::Reply {
    let auth = format!("Bearer {TOKEN}");
    HttpClient::default()
        .send(
            Method::POST,
            &gw.admin("/v1/decisions"),
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            body,
        )
        .await
}

/// Every cost that could wrap, loop or never fit is refused before the store sees it, with the
/// same answer on both stores; the largest legal cost is charged exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_costs_outside_one_to_the_smallest_limit_are_refused() {
    let redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let redis_store = gateway::redis_store(&redis.url(), &unique_prefix("cost"));
    for store in [redis_store.as_str(), "backend = \"memory\""] {
        let gw = gateway::start(&config(store, &up.url(), ROUTE)).await;
        for cost in [
            "0",
            "-1",
            "1.5",
            "\"1\"",
            "6",
            "9223372036854775808",
            "18446744073709551616",
            "1e20",
            "true",
        ] {
            let body = format!(r#"{{"route":"campaign","keys":["u1"],"cost":{cost}}}"#);
            let r = batch(&gw, &body).await;
            assert_eq!(r.status, 400, "cost {cost} on {store}: {}", r.body);
            let problem = r.json();
            assert_eq!(problem["error"], "cost_out_of_range", "cost {cost}");
            assert_eq!(problem["field"], "cost", "cost {cost}");
        }
        let r = batch(&gw, r#"{"route":"campaign","keys":["u1","u1"],"cost":5}"#).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let results = r.json()["results"].clone();
        assert_eq!(results[0]["allowed"], true);
        assert_eq!(results[0]["remaining"], 0);
        assert_eq!(
            results[1]["allowed"], false,
            "a second cost of 5 does not fit"
        );
        gw.stop().await;
    }
}

/// `"dry_run": true` decides like the call would and charges nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_charges_nothing() {
    let redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let store = gateway::redis_store(&redis.url(), &unique_prefix("dry"));
    let gw = gateway::start(&config(&store, &up.url(), ROUTE)).await;
    for _ in 0..3 {
        let r = batch(
            &gw,
            r#"{"route":"campaign","keys":["u7"],"cost":5,"dry_run":true}"#,
        )
        .await;
        assert_eq!(r.json()["results"][0]["allowed"], true, "{}", r.body);
    }
    let r = batch(&gw, r#"{"route":"campaign","keys":["u7"],"cost":5}"#).await;
    assert_eq!(
        r.json()["results"][0]["allowed"],
        true,
        "the dry runs charged: {}",
        r.body
    );
    let r = batch(
        &gw,
        r#"{"route":"campaign","keys":["u7"],"cost":1,"dry_run":true}"#,
    )
    .await;
    assert_eq!(r.json()["results"][0]["allowed"], false);
    gw.stop().await;
}

/// The memory store holds at most `max_keys` live keys: a key it does not hold while full is
/// counted in the overflow sketch (`kind="full"`), never handed to `on_error`; the keys it
/// holds keep exact counts, so a flood of new keys frees no one's quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_store_is_bounded_and_keeps_what_it_holds() {
    let up = upstream::start().await;
    let store = "backend = \"memory\"\nmax_keys = 10\non_error = \"deny\"";
    let routes = ROUTE.replace("limit = 5", "limit = 1");
    let gw = gateway::start(&config(store, &up.url(), &routes)).await;
    let client = HttpClient::default();
    let url = gw.url("/campaign");
    let user = |u: String| {
        let client = client.clone();
        let url = url.clone();
        async move { client.status(&url, &[("x-user", &u)]).await }
    };
    assert_eq!(user("held".into()).await, 200);
    for i in 0..50 {
        user(format!("flood{i}")).await;
    }
    assert_eq!(
        user("held".into()).await,
        429,
        "the flood freed a held key's quota"
    );
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    let full = value(
        &metrics,
        "slidegate_store_errors_total",
        &[("kind", "full")],
    );
    assert!(full.unwrap_or(0.0) >= 40.0, "{full:?}");
    let denied = value(
        &metrics,
        "slidegate_requests_total",
        &[("route", "campaign"), ("decision", "store_error_denied")],
    );
    assert_eq!(
        denied.unwrap_or(0.0),
        0.0,
        "a full store is not a failed one"
    );
    gw.stop().await;
}

/// Two gateways on one Redis: the instance that did not start a block answers the same true
/// wait as the one that did (the window's, when it outlasts the block), and a client that waits
/// exactly that long is allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_instance_answers_the_true_wait_of_a_block() {
    let redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let store = gateway::redis_store(&redis.url(), &unique_prefix("blockwait"));
    let routes = r#"
[[routes]]
name = "otp"
path = "/otp"
upstream = "up"
key = ["header:x-user"]
on_exceed = "block"
block_for = "1s"
  [[routes.limits]]
  name = "per-2s"
  limit = 1
  window = "2500ms"
"#;
    let a = gateway::start(&config(&store, &up.url(), routes)).await;
    let b = gateway::start(&config(&store, &up.url(), routes)).await;
    let client = HttpClient::default();
    let user = [("x-user", "u")];
    assert_eq!(client.status(&a.url("/otp"), &user).await, 200);
    let started = client.get(&a.url("/otp"), &user).await;
    assert_eq!(started.status, 429);
    let seen_by_b = client.get(&b.url("/otp"), &user).await;
    assert_eq!(seen_by_b.status, 429);
    let wait_a = started.json()["retry_after_ms"].as_u64().unwrap();
    let wait_b = seen_by_b.json()["retry_after_ms"].as_u64().unwrap();
    assert!(wait_a > 1000, "the window outlasts the 1 s block: {wait_a}");
    assert!(
        wait_b > 1000,
        "instance B answered the block's remaining time only: {wait_b}"
    );
    assert!(wait_b <= wait_a);
    tokio::time::sleep(Duration::from_millis(wait_b + 20)).await;
    assert_eq!(client.status(&b.url("/otp"), &user).await, 200);
    a.stop().await;
    b.stop().await;
}

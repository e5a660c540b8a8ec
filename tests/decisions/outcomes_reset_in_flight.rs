//! A reset forgives answers, never what is still being decided (SPEC section 9): with
//! `reset_status = [200]`, a success clears the attempts already answered (and gives its own
//! reservation back), while reservations still in flight stay reserved until they are
//! answered. Checked on the store (every algorithm, the memory store and Redis) and through the
//! gateway (one success while four failures are in flight lets one more in, not five).

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use slidegate::config::ClockSource;
use slidegate::store::{Decision, LimitSet, MemoryStore, Store};
use support::http::HttpClient;
use support::otp_login::{gateway_on, login_route, post, AuthUpstream};
use support::redis::RedisServer;
use support::store::{bases, limit_sets, redis_store, reserve, settle_first, Settle};
use support::unique_prefix;

const ALGORITHMS: [&str; 3] = ["sliding_log", "sliding_window_counter", "gcra"];

/// The login route's limit: 5 failures a day, a success resets, on `algorithm`.
fn login(algorithm: &str) -> String {
    login_route(&format!(
        "limit = 5\nwindow = \"1d\"\nalgorithm = \"{algorithm}\"\ncount_status = [401]\nreset_status = [200]"
    ))
}

/// Of `n` attempts, the admitted ones.
async fn admitted(store: &Store, set: &Arc<LimitSet>, bases: &[String], n: usize) -> Vec<Decision> {
    let mut allowed = Vec::new();
    for _ in 0..n {
        let d = reserve(store, set, bases, None).await;
        if d.allowed() {
            allowed.push(d);
        }
    }
    allowed
}

/// Four failures in flight and a success answered: the reset gives room for one attempt, not
/// five. Once the failures are answered (counted) and an attempt refunded, the next success
/// forgives them all.
async fn the_reset_keeps_what_is_in_flight(store: &Store, algorithm: &str) {
    let set = limit_sets(&login(algorithm)).remove(0);
    let bases = bases(&unique_prefix("reset"), "login", "ann");
    let failures = admitted(store, &set, &bases, 4).await;
    assert_eq!(failures.len(), 4, "{algorithm}");
    let success = reserve(store, &set, &bases, None).await;
    settle_first(store, &set, &bases, &success, Settle::Reset).await;
    let after_reset = admitted(store, &set, &bases, 5).await;
    assert_eq!(
        after_reset.len(),
        1,
        "{algorithm}: the four failures in flight stay reserved after a reset"
    );
    for failure in &failures {
        settle_first(store, &set, &bases, failure, Settle::Confirm).await;
    }
    settle_first(store, &set, &bases, &after_reset[0], Settle::Refund).await;
    let success = reserve(store, &set, &bases, None).await;
    assert!(success.allowed(), "{algorithm}: room after the refund");
    settle_first(store, &set, &bases, &success, Settle::Reset).await;
    assert_eq!(
        admitted(store, &set, &bases, 6).await.len(),
        5,
        "{algorithm}: the answered failures are forgiven"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_memory_store_a_reset_keeps_what_is_in_flight() {
    let store = Store::Memory(MemoryStore::new(1000));
    for algorithm in ALGORITHMS {
        the_reset_keeps_what_is_in_flight(&store, algorithm).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_a_reset_keeps_what_is_in_flight() {
    let server = RedisServer::start_async().await;
    let store = redis_store(&server, Duration::from_secs(2), ClockSource::Redis).await;
    for algorithm in ALGORITHMS {
        the_reset_keeps_what_is_in_flight(&store, algorithm).await;
    }
}

/// Through the gateway, for every algorithm: four failed logins held in flight at the upstream,
/// then one success answered: five more failed attempts let one through (the limit's fifth),
/// not five: at most `limit` failures reach the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_success_while_failures_are_in_flight_lets_no_more_than_the_limit_through() {
    let redis = RedisServer::start_async().await;
    for algorithm in ALGORITHMS {
        let upstream = AuthUpstream::start().await;
        let gw = gateway_on(&redis, &upstream, &login(algorithm)).await;
        let client = HttpClient::default();
        let held: Vec<_> = (0..4)
            .map(|_| {
                let (client, url) = (client.clone(), gw.url("/api/login?ms=1500"));
                let body = r#"{"username":"ann","password":"wrong"}"#;
                tokio::spawn(async move { post(&client, &url, &[], body).await.status })
            })
            .collect();
        for _ in 0..500 {
            if upstream.bodies("/api/login").len() == 4 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(upstream.bodies("/api/login").len(), 4, "{algorithm}");
        let url = gw.url("/api/login");
        let right = r#"{"username":"ann","password":"right"}"#;
        assert_eq!(post(&client, &url, &[], right).await.status, 200);
        let mut statuses = Vec::new();
        for _ in 0..5 {
            let wrong = r#"{"username":"ann","password":"wrong"}"#;
            statuses.push(post(&client, &url, &[], wrong).await.status.as_u16());
        }
        assert_eq!(statuses, [401, 429, 429, 429, 429], "{algorithm}");
        let failures = upstream
            .texts("/api/login")
            .iter()
            .filter(|b| b.contains("wrong"))
            .count();
        assert_eq!(failures, 5, "{algorithm}: failed attempts at the upstream");
        for h in held {
            assert_eq!(h.await.unwrap(), 401);
        }
        gw.stop().await;
    }
}

//! `/admin/blocked` after a refusal made while the key's attempts were in flight: the refusal
//! is told only until the soonest of them is settled, but once they fail and fill the window the
//! window refuses the key for its whole length, so the key stays listed (found without
//! `value=`), on Redis and on the memory store alike.

use crate::support;

use std::time::Duration;

use support::auth::AuthUpstream;
use support::gateway::{self, config, Gateway};
use support::http::HttpClient;
use support::otp_login::{login_route, post};
use support::redis::RedisServer;
use support::unique_prefix;

/// Three failed logins a minute on a blocking route (the test config's upstream answers within
/// 2 s).
fn routes() -> String {
    login_route("limit = 3\nwindow = \"1m\"\ncount_status = [401]").replacen(
        "upstream = \"up\"\n",
        "upstream = \"up\"\non_exceed = \"block\"\nblock_for = \"1s\"\n",
        1,
    )
}

/// Three failures for `user` in flight, a fourth attempt refused on them, the three answered
/// 401; once the refusal's own wait has ended, the key is still listed, its window refusing it.
async fn listed_after_its_attempts_fail(gw: &Gateway) {
    let client = HttpClient::default();
    let url = gw.url("/api/login?ms=1500");
    let body = r#"{"username":"mallory","password":"wrong"}"#;
    let attempts: Vec<_> = (0..3)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move { post(&client, &url, &[], body).await.status.as_u16() })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused = post(&client, &gw.url("/api/login"), &[], body).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    let told = refused.json()["retry_after_ms"].as_u64().unwrap();
    assert!(
        told <= 3_000,
        "told {told} ms: the wait for the attempts in flight"
    );
    for a in attempts {
        assert_eq!(a.await.unwrap(), 401);
    }
    tokio::time::sleep(Duration::from_millis(told + 300)).await;
    let blocked = gw.admin_json("/admin/blocked?route=login").await;
    let listed = &blocked["blocked"][0];
    assert_eq!(listed["key"], "mallory", "{blocked}");
    assert_eq!(listed["reason"], "window", "{blocked}");
    assert!(
        listed["retry_after_ms"].as_u64().unwrap() > 50_000,
        "{blocked}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_refused_on_attempts_in_flight_stays_listed_once_they_fail_on_redis() {
    let redis = RedisServer::start();
    let up = AuthUpstream::start().await;
    let store = gateway::redis_store(&redis.url(), &unique_prefix("inflight-listed"));
    let gw = gateway::start(&config(&store, &up.url(), &routes())).await;
    listed_after_its_attempts_fail(&gw).await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_refused_on_attempts_in_flight_stays_listed_once_they_fail_in_memory() {
    let up = AuthUpstream::start().await;
    let gw = gateway::start(&config("backend = \"memory\"", &up.url(), &routes())).await;
    listed_after_its_attempts_fail(&gw).await;
    gw.stop().await;
}

//! A slot taken by a decision call that timed out: Redis runs the call once it answers again,
//! long after the attempt was answered by `on_error` and ended. The gateway frees such a lease
//! itself (the call's slots are released on the same connection, behind it), so a stall of the
//! store does not lock the key out for the whole `lease`.

use crate::support;

use http::Method;
use support::admin::auth;
use support::gateway::{config, redis_store, start, Gateway};
use support::http::HttpClient;
use support::leaving::eventually;
use support::llm;
use support::redis::{RedisServer, Resp};
use support::unique_prefix;

const ROUTE: &str = r#"
[[routes]]
name = "chat"
path = "/v1/*"
upstream = "up"
key = ["header:x-api-key"]
on_error = "allow"
  [[routes.limits]]
  name = "inflight"
  limit = 1
  algorithm = "concurrency"
  lease = "10m"
"#;

async fn post(gw: &Gateway, key: &str) -> support::http::Reply {
    let headers = [("x-api-key", key), ("content-type", "application/json")];
    let body = r#"{"stream":false,"reply_tokens":2}"#;
    HttpClient::default()
        .send(
            Method::POST,
            &gw.url("/v1/chat/completions"),
            &headers,
            body,
        )
        .await
}

/// The leases the key's set holds in Redis (any gateway's).
fn leases(redis: &RedisServer) -> i64 {
    let Resp::Array(keys) = redis.cmd(&["KEYS", "*#inflight*"]) else {
        panic!("KEYS answers an array");
    };
    keys.iter()
        .map(|k| redis.cmd(&["ZCARD", &k.text()]).int())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_a_timed_out_call_took_later_is_freed_not_held_for_its_lease() {
    let redis = RedisServer::start();
    let up = llm::start().await;
    let store = redis_store(&redis.url(), &unique_prefix("inflight-stall"));
    let gw = start(&config(&store, &up.url(), ROUTE)).await;
    assert_eq!(post(&gw, "ann").await.status, 200, "the store answers");
    redis.pause();
    // The call times out (200 ms): on_error lets the attempt through, and it ends.
    let during = post(&gw, "ann").await;
    assert_eq!(during.status, 200, "{}", during.body);
    redis.resume();
    // Redis then runs the call and takes the lease; the gateway's release follows it.
    eventually(|| async { (leases(&redis) == 0).then_some(()) }).await;
    let (name, token) = auth();
    let usage = HttpClient::default()
        .get(
            &gw.admin("/admin/usage?route=chat&key=ann&limit=inflight"),
            &[(name, &token)],
        )
        .await;
    assert_eq!(usage.json()["limits"][0]["in_flight"], 0, "{}", usage.body);
    assert_eq!(post(&gw, "ann").await.status, 200, "the key has its slot");
}

//! The `sliding_window_counter` algorithm end to end, read in Redis through the documented layout
//! (`src/store/layout.rs`): one hash `<prefix>:{<route>|<key>}#swc` per key with one field per
//! limit, whatever the traffic; and a route that mixes it with a `sliding_log` limit (whose sorted
//! set is `...#log`) decides both in one decision.

use crate::support;

use support::http::HttpClient;
use support::rate_limits::{on_redis, route};
use support::redis::{RedisServer, Resp};
use support::{unique_prefix, upstream};

/// `routes` with the limits of window `window` counted by `sliding_window_counter`.
fn by_counter(routes: String, window: &str) -> String {
    let line = format!("  window = \"{window}\"\n");
    routes.replace(
        &line,
        &format!("{line}  algorithm = \"sliding_window_counter\"\n"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_window_counter_limits_approximately_with_constant_memory() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let prefix = unique_prefix("swc");
    let routes = by_counter(
        route("counter", "\"ip\"", "", &[("per-minute", 3, "1m")]),
        "1m",
    );
    let gw = on_redis(&redis, &prefix, &up.url(), &routes).await;
    let client = HttpClient::default();
    let mut codes = Vec::new();
    for _ in 0..6 {
        codes.push(client.get(&gw.url("/x"), &[]).await.status.as_u16());
    }
    assert_eq!(codes, [200, 200, 200, 429, 429, 429]);
    // One hash per key for every limit: one field per limit, whatever the traffic, holding
    // "<window index> <count> <previous count> <window length>".
    let key = format!("{prefix}:{{counter|127.0.0.1}}#swc");
    assert_eq!(redis.cmd(&["TYPE", &key]), Resp::Simple("hash".into()));
    assert_eq!(redis.cmd(&["HLEN", &key]).int(), 1);
    let Resp::Bulk(Some(stored)) = redis.cmd(&["HGET", &key, "per-minute"]) else {
        panic!("no per-minute field")
    };
    let fields: Vec<&str> = stored.split(' ').collect();
    assert_eq!(fields.len(), 4, "{stored}");
    assert_eq!(
        fields[1], "3",
        "only allowed requests are counted: {stored}"
    );
    assert_eq!(fields[3], "60000000", "the window length in µs: {stored}");
}

/// A route that mixes the algorithms: the limits are still decided together (a request refused
/// by one limit charges neither), each in its own layout: a sorted set for the log's limit, the
/// key's hash for the counter's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_route_mixes_a_sliding_log_and_a_counter_in_one_decision() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let prefix = unique_prefix("mixed");
    let limits = [("per-minute", 5, "1m"), ("per-day", 2, "1d")];
    let routes = by_counter(route("mixed", "\"ip\"", "", &limits), "1d");
    let gw = on_redis(&redis, &prefix, &up.url(), &routes).await;
    let client = HttpClient::default();
    let mut codes = Vec::new();
    let mut last = None;
    for _ in 0..4 {
        let r = client.get(&gw.url("/x"), &[]).await;
        codes.push(r.status.as_u16());
        last = Some(r);
    }
    assert_eq!(codes, [200, 200, 429, 429]);
    let refused = last.unwrap();
    assert_eq!(refused.json()["limit"], "per-day", "{}", refused.body);
    assert_eq!(
        refused.header("ratelimit-policy"),
        Some("\"per-minute\";q=5;w=60, \"per-day\";q=2;w=86400")
    );
    let base = format!("{prefix}:{{mixed|127.0.0.1}}");
    assert_eq!(
        redis.cmd(&["ZCARD", &format!("{base}#log")]).int(),
        2,
        "the log records the two allowed requests only: the refused ones charged neither limit"
    );
    let Resp::Bulk(Some(stored)) = redis.cmd(&["HGET", &format!("{base}#swc"), "per-day"]) else {
        panic!("no per-day field in the counter's hash")
    };
    assert_eq!(stored.split(' ').nth(1), Some("2"), "{stored}");
    assert_eq!(
        redis
            .cmd(&["HEXISTS", &format!("{base}#swc"), "per-minute"])
            .int(),
        0,
        "the log's limit keeps no counter"
    );
}

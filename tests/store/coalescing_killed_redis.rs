//! A Redis killed in the middle of a batch leaves no key waiting (README, "Which algorithm" and "The traffic path"): every key
//! ends, with the route's `on_error` where Redis could not decide it, and while Redis stays down
//! every call fails on the connection at once instead of waiting out `store.timeout`. The kill is
//! timed by the calls Redis has run (`INFO commandstats`), not by a clock.

use crate::support;

use std::time::Duration;

use support::coalescing::{calls, start_batch, wait_for_calls, BATCH_IN_FLIGHT, PER_CALL};
use support::gateway::{self, config};
use support::http::HttpClient;
use support::observe::metric;
use support::redis::RedisServer;
use support::resp::RespConn;
use support::{unique_prefix, upstream};

/// `store.timeout` of the killed-Redis test.
const TIMEOUT: Duration = Duration::from_millis(200);

/// How long a batch of `calls` calls may take at most before it must have ended: the batch's
/// own budget (`store.timeout` per call) and a generous margin. A liveness bound, not a
/// measurement: a key that waited for a dead Redis would never end.
fn batch_bound(calls: usize) -> Duration {
    TIMEOUT * calls as u32 + Duration::from_secs(5)
}

/// A batch of 10,000 keys (40 calls of 256) through `/v1/decisions` while its Redis is
/// killed: the batch ends, and every key is answered, those decided before the kill as Redis
/// said, every other one by the route's `on_error` (deny). The same batch sent while Redis
/// stays down ends too, every key denied, each call failing on the connection (no call waits
/// for `store.timeout`). Every failure is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_killed_mid_batch_leaves_no_key_waiting() {
    const KEYS: usize = 10_000;
    let mut redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{}\"\ntimeout = \"{}ms\"",
        redis.url(),
        unique_prefix("killed"),
        TIMEOUT.as_millis()
    );
    let route = "[[routes]]\nname = \"users\"\npath = \"/*\"\nupstream = \"up\"\n\
                 key = [\"header:X-User\"]\non_error = \"deny\"\n\
                 [[routes.limits]]\nname = \"per-minute\"\nlimit = 5\nwindow = \"1m\"\n";
    let gw = gateway::start(&config(&store, &up.url(), route)).await;
    let keys: Vec<String> = (0..KEYS).map(|i| format!("user-{i}")).collect();
    let calls_of_batch = KEYS.div_ceil(PER_CALL);
    let client = HttpClient::default();
    let mut watcher = RespConn::connect(redis.port).await;
    let before = calls(&mut watcher).await;
    let batch = start_batch(&client, &gw, &keys);

    // Kill it once Redis has answered a few of the batch's calls.
    wait_for_calls(&mut watcher, before + 3).await;
    redis.kill();
    let reply = tokio::time::timeout(batch_bound(calls_of_batch), batch)
        .await
        .expect("the batch ended: no key waits for a dead Redis")
        .unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    let results = reply.json()["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), KEYS);
    let mut decided = 0;
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["key"], format!("user-{i}"));
        if r["decision"] == "allowed" {
            assert_eq!(
                (r["allowed"].clone(), r["remaining"].clone()),
                (true.into(), 4.into())
            );
            decided += 1;
        } else {
            assert_eq!(r["decision"], "store_error_denied", "{r}");
            assert_eq!(r["allowed"], false);
            assert_eq!(r["retry_after_ms"], 1000);
            assert_eq!(r["error"], "store_unavailable");
            assert!(r["remaining"].is_null(), "the store could not say: {r}");
        }
    }
    // Redis had run three calls, so the gateway had the answer of the first at least (a third
    // goes out only once the first is answered); the replies of the last ones may have died
    // with Redis.
    assert!(
        ((3 - BATCH_IN_FLIGHT) * PER_CALL..KEYS).contains(&decided),
        "killed mid-batch: {decided} keys decided before the kill"
    );

    // Redis stays down: the same batch again ends, every key denied, every call failing on the
    // connection instead of timing out.
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    let errors = |metrics: &str, kind: &str| {
        metric(metrics, "slidegate_store_errors_total", &[("kind", kind)]) as usize
    };
    let timeouts_before = errors(&metrics, "timeout");
    let connection_before = errors(&metrics, "connection");
    let again = tokio::time::timeout(
        batch_bound(calls_of_batch),
        start_batch(&client, &gw, &keys),
    )
    .await
    .expect("the batch ended while Redis is down")
    .unwrap();
    assert_eq!(again.status, 200);
    let results = again.json()["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), KEYS);
    assert!(results
        .iter()
        .all(|r| r["decision"] == "store_error_denied"));
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert_eq!(
        errors(&metrics, "timeout"),
        timeouts_before,
        "no call waited for the dead Redis until its deadline"
    );
    assert!(
        errors(&metrics, "connection") - connection_before >= calls_of_batch,
        "each call of the batch failed on the connection and was counted: {metrics}"
    );
    let label = |d: &str| {
        metric(
            &metrics,
            "slidegate_requests_total",
            &[("route", "users"), ("decision", d)],
        ) as usize
    };
    assert_eq!(label("allowed"), decided);
    assert_eq!(label("store_error_denied"), 2 * KEYS - decided);
}

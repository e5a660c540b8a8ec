//! The deny cache end to end: after a key's first rejection, a flood on it costs Redis nothing
//! (no decision call, `EVALSHA` or `FCALL`, runs), and every refusal still gets its headers and is counted.

use crate::support;

use support::http::HttpClient;
use support::rate_limits::{on_redis, route};
use support::redis::RedisServer;
use support::{unique_prefix, upstream};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_on_one_key_costs_redis_nothing_after_the_first_rejection() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let routes = route("login", "\"ip\"", "", &[("per-minute", 3, "1m")]);
    let gw = on_redis(&redis, &unique_prefix("deny"), &up.url(), &routes).await;
    let client = HttpClient::default();
    for _ in 0..4 {
        client.get(&gw.url("/login"), &[]).await;
    }
    let before = redis.decision_calls();
    for _ in 0..200 {
        let r = client.get(&gw.url("/login"), &[]).await;
        assert_eq!(r.status, 429);
        assert!(r.header("retry-after").is_some() && r.header("ratelimit").is_some());
    }
    assert_eq!(
        redis.decision_calls(),
        before,
        "the deny cache answered every one of them"
    );
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert!(
        metrics.contains("slidegate_deny_cache_hits_total{route=\"login\"} 200"),
        "{metrics}"
    );
    assert!(
        metrics.contains("slidegate_requests_total{decision=\"rejected\",route=\"login\"} 201"),
        "{metrics}"
    );
    assert!(
        metrics
            .contains("slidegate_limit_exceeded_total{limit=\"per-minute\",mode=\"enforced\",route=\"login\"} 201"),
        "{metrics}"
    );
}

const PER_USER_AND_DEVICE: &str = r#"
[[routes]]
name = "two"
path = "/two"
upstream = "up"
  [[routes.limits]]
  name = "per-user"
  key = ["header:X-User"]
  limit = 1
  window = "1s"
  [[routes.limits]]
  name = "per-device"
  key = ["header:X-Device"]
  limit = 1
  window = "1m"
"#;

/// With a key per limit, each key is remembered with its own wait, not the request's: a user
/// refused alongside a device that must wait a minute is held back for its own second only,
/// and a request with another device is answered for the user's limit alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_key_is_remembered_with_its_own_wait() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let gw = on_redis(
        &redis,
        &unique_prefix("deny-keys"),
        &up.url(),
        PER_USER_AND_DEVICE,
    )
    .await;
    let client = HttpClient::default();
    let send = |device: &'static str| {
        let client = client.clone();
        let url = gw.url("/two");
        async move {
            client
                .get(&url, &[("x-user", "ann"), ("x-device", device)])
                .await
        }
    };
    assert_eq!(send("d1").await.status, 200);
    let both = send("d1").await;
    assert_eq!(both.status, 429);
    assert_eq!(
        both.json()["limit"],
        "per-device",
        "the longest wait is named"
    );
    // Another device: the user's own second, not the first device's minute.
    let user_only = send("d2").await;
    assert_eq!(user_only.status, 429);
    let body = user_only.json();
    assert_eq!(body["limit"], "per-user", "{body}");
    assert!(body["retry_after_ms"].as_u64().unwrap() <= 1_000, "{body}");
    // Once the user's second is over, the user is let through with a fresh device.
    tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
    assert_eq!(send("d3").await.status, 200);
}

/// On a blocking route, a block's refusal is cached until the block ends, not until the window
/// lets the key in: the attempt after the block meets the store, which starts the next, longer
/// block (as any other instance would), rather than a cached 429 of the old one. The first
/// block lasts 1 s, the window a minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_block_lasts_until_the_block_ends() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let extra = "on_exceed = \"block\"\nblock_for = \"1s\"\nblock_growth = 4";
    let routes = route("login", "\"ip\"", extra, &[("per-minute", 2, "1m")]);
    let gw = on_redis(&redis, &unique_prefix("deny-block"), &up.url(), &routes).await;
    let client = HttpClient::default();
    for _ in 0..2 {
        assert_eq!(client.status(&gw.url("/login"), &[]).await, 200);
    }
    let level = |r: &support::http::Reply| r.json()["block_level"].as_u64();
    let first = client.get(&gw.url("/login"), &[]).await;
    assert_eq!(
        (first.status.as_u16(), level(&first)),
        (429, Some(1)),
        "{}",
        first.body
    );
    // within the block: answered from the cache
    let calls = redis.decision_calls();
    assert_eq!(client.status(&gw.url("/login"), &[]).await, 429);
    assert_eq!(redis.decision_calls(), calls, "the cache answered");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let next = client.get(&gw.url("/login"), &[]).await;
    assert_eq!(
        (next.status.as_u16(), level(&next)),
        (429, Some(2)),
        "{}",
        next.body
    );
    let seconds: u64 = next.header("retry-after").unwrap().parse().unwrap();
    assert!(seconds > 1, "the window's wait is told: {seconds}");
    gw.stop().await;
}

const COSTS: &str = r#"
[[routes]]
name = "costs"
path = "/costs"
upstream = "up"
key = ["header:X-User"]
  [[routes.limits]]
  name = "units"
  limit = 3
  window = "20s"
  cost_from = "header:X-Usage"
  cost = "json:n"
"#;

/// A cached refusal was decided for one unit: a costlier request on the same key waits longer
/// (more entries must leave the window), so the store decides it and tells its own exact wait,
/// not the cached one-unit wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_costlier_request_is_told_its_own_wait_not_the_cached_one() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let gw = on_redis(&redis, &unique_prefix("deny-cost"), &up.url(), COSTS).await;
    let client = HttpClient::default();
    let send = |n: u64| {
        let client = client.clone();
        let url = gw.url("/costs");
        async move {
            let body = format!("{{\"n\":{n}}}");
            let headers = [("x-user", "ann"), ("content-type", "application/json")];
            client.send(http::Method::POST, &url, &headers, &body).await
        }
    };
    assert_eq!(send(1).await.status, 200);
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    assert_eq!(send(2).await.status, 200);
    // one unit: the first entry must leave (about 18.5 s), and the refusal is cached
    let one = send(1).await;
    assert_eq!(one.status, 429);
    let one_wait = one.json()["retry_after_ms"].as_u64().unwrap();
    let before = redis.decision_calls();
    // two units: the second request's first unit must leave too, 1.5 s later
    let two = send(2).await;
    assert_eq!(two.status, 429);
    let two_wait = two.json()["retry_after_ms"].as_u64().unwrap();
    assert!(
        two_wait >= one_wait + 1_000,
        "two units wait {two_wait} ms, one unit {one_wait} ms"
    );
    assert_eq!(redis.decision_calls(), before + 1, "the store decided it");
    // a one-unit request is still answered from the cache
    let again = send(1).await;
    assert_eq!(again.status, 429);
    assert_eq!(redis.decision_calls(), before + 1, "the cache answered it");
}

const TWO_KEYS: &str = r#"
[[routes]]
name = "pair"
path = "/pair"
upstream = "up"
key = ["header:X-User"]
  [[routes.limits]]
  name = "per-user"
  limit = 5
  window = "10s"
  [[routes.limits]]
  name = "per-device"
  key = ["header:X-Device"]
  limit = 2
  window = "10s"
"#;

/// A request both of whose keys the cache holds back is answered with the longer wait of the
/// two, naming its limit, as the store answered it: not with whichever key was looked up first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_refused_on_two_cached_keys_is_told_the_longer_wait() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let gw = on_redis(&redis, &unique_prefix("deny-pair"), &up.url(), TWO_KEYS).await;
    let client = HttpClient::default();
    let send = |user: &str, device: &str| {
        let (client, url) = (client.clone(), gw.url("/pair"));
        let headers = [
            ("x-user", user.to_string()),
            ("x-device", device.to_string()),
        ];
        async move {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            client.get(&url, &headers).await
        }
    };
    for n in 0..5 {
        assert_eq!(send("ann", &format!("d{n}")).await.status, 200);
    }
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    for _ in 0..2 {
        assert_eq!(send("bob", "shared").await.status, 200);
    }
    // the user's window frees a unit in about 8.5 s, the device's in about 10 s
    let stored = send("ann", "shared").await;
    assert_eq!(stored.status, 429);
    assert_eq!(stored.json()["limit"], "per-device", "{}", stored.body);
    let before = redis.decision_calls();
    let cached = send("ann", "shared").await;
    assert_eq!(redis.decision_calls(), before, "the cache answered it");
    let body = cached.json();
    assert_eq!(cached.status, 429);
    assert_eq!(body["limit"], "per-device", "{body}");
    assert!(body["retry_after_ms"].as_u64().unwrap() > 9_000, "{body}");
    assert_eq!(
        body["violated-policies"],
        serde_json::json!(["per-user", "per-device"])
    );
}

/// Redis keeps no message for a subscriber that is away: a reset published while an
/// instance's reset subscription is down never reaches it. Once subscribed again, the instance
/// forgets every refusal its deny cache held, so none outlives such a reset by more than the
/// reconnect (here the key's state is deleted with no message at all, as a reset whose message
/// was lost leaves it, before the subscription's link is cut).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_missed_while_the_subscription_was_down_holds_no_refusal_back() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let prefix = unique_prefix("missed");
    let routes = route("login", "\"ip\"", "", &[("per-minute", 1, "1m")]);
    let gw = on_redis(&redis, &prefix, &up.url(), &routes).await;
    let client = HttpClient::default();
    let login = gw.url("/login");
    assert_eq!(client.get(&login, &[]).await.status, 200);
    assert_eq!(client.get(&login, &[]).await.status, 429);
    let before = redis.decision_calls();
    assert_eq!(client.get(&login, &[]).await.status, 429);
    assert_eq!(redis.decision_calls(), before, "held by the deny cache");

    let delete = "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) end";
    redis.cmd(&["EVAL", delete, "0", &format!("{prefix}*")]);
    let killed = redis.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]).int();
    assert!(killed >= 1, "the reset subscription's link");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut status = http::StatusCode::TOO_MANY_REQUESTS;
    while status == 429 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        status = client.get(&login, &[]).await.status;
    }
    assert_eq!(
        status, 200,
        "the deny cache still refused a key the store has room for"
    );
}

//! Rate limiting end to end: real redis-server, real upstream, real gateways, real HTTP. Where a
//! test reads Redis itself it reads the documented layout (`src/store/layout.rs`): one sorted set
//! `<prefix>:{<route>|<key>}#log` for a route's `sliding_log` limits that count the same key (a
//! limit with a key of its own has its own, `{<route>~<hex>|<key>}`), one hash `...#swc` for its
//! counters.

mod support;

use std::time::{Duration, Instant};

use support::gateway::{self, config, redis_store, Gateway, TOKEN};
use support::http::HttpClient;
use support::redis::{RedisServer, Resp};
use support::{observe, unique_prefix, upstream};

fn route(name: &str, key: &str, extra: &str, limits: &[(&str, u64, &str)]) -> String {
    let mut out = format!(
        "[[routes]]\nname = \"{name}\"\npath = \"/*\"\nupstream = \"up\"\nkey = [{key}]\n{extra}\n"
    );
    for (n, l, w) in limits {
        out.push_str(&format!(
            "  [[routes.limits]]\n  name = \"{n}\"\n  limit = {l}\n  window = \"{w}\"\n"
        ));
    }
    out
}

/// A gateway with `routes` in front of `upstream`, deciding in `redis` under `prefix`.
async fn on_redis(redis: &RedisServer, prefix: &str, upstream: &str, routes: &str) -> Gateway {
    gateway::start(&config(
        &redis_store(&redis.url(), prefix),
        upstream,
        routes,
    ))
    .await
}

/// `routes` with the limits of window `window` counted by `sliding_window_counter`.
fn by_counter(routes: String, window: &str) -> String {
    let line = format!("  window = \"{window}\"\n");
    routes.replace(
        &line,
        &format!("{line}  algorithm = \"sliding_window_counter\"\n"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_sharing_redis_allow_exactly_the_limit() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let routes = route("shared", "\"route\"", "", &[("per-minute", 25, "1m")]);
    let cfg = config(
        &redis_store(&redis.url(), &unique_prefix("fleet")),
        &up.url(),
        &routes,
    );
    let a = gateway::start(&cfg).await;
    let b = gateway::start(&cfg).await;
    let client = HttpClient::default();
    let urls = (0..120)
        .map(|i| if i % 2 == 0 { a.url("/x") } else { b.url("/x") })
        .collect();
    let results = client.get_concurrently(urls).await;
    let allowed = results.iter().filter(|r| r.0 == 200).count();
    let rejected = results.iter().filter(|r| r.0 == 429).count();
    assert_eq!(allowed + rejected, 120, "only 200s and 429s: {results:?}");
    assert_eq!((allowed, rejected), (25, 95));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_exact() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let routes = route("exact", "\"ip\"", "", &[("per-3s", 2, "3s")]);
    let gw = on_redis(&redis, &unique_prefix("exact"), &up.url(), &routes).await;
    let client = HttpClient::default();
    assert_eq!(client.get(&gw.url("/a"), &[]).await.status, 200);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(client.get(&gw.url("/a"), &[]).await.status, 200);
    let rejected = client.get(&gw.url("/a"), &[]).await;
    let received = Instant::now();
    assert_eq!(rejected.status, 429);
    let retry_ms = rejected.json()["retry_after_ms"].as_u64().unwrap();
    assert!(
        (2000..=3000).contains(&retry_ms),
        "retry_after_ms {retry_ms}"
    );

    tokio::time::sleep_until((received + Duration::from_millis(retry_ms - 300)).into()).await;
    assert_eq!(
        client.get(&gw.url("/a"), &[]).await.status,
        429,
        "300 ms early must still be rejected"
    );
    tokio::time::sleep_until((received + Duration::from_millis(retry_ms + 100)).into()).await;
    assert_eq!(
        client.get(&gw.url("/a"), &[]).await.status,
        200,
        "100 ms after Retry-After must be allowed"
    );
}

/// A request is charged to every limit of its route or to none. `r1`'s limits count two keys
/// (the route's `ip`, and `big`'s own `method`), so they live in two sorted sets: the requests
/// `small` refuses must leave `big`'s set alone. `r2`'s two limits count the same key, so they
/// share ONE sorted set, which records each allowed request once whatever the number of limits
/// and the refused ones not at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_rejected_by_one_limit_charges_none_of_the_others() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let prefix = unique_prefix("atomic");
    let r1 = route("r1", "\"ip\"", "", &[("small", 2, "1m"), ("big", 5, "1h")]).replace(
        "  name = \"big\"\n",
        "  name = \"big\"\n  key = [\"method\"]\n",
    );
    // r2 must match before the catch-all r1.
    let r2 = route(
        "r2",
        "\"ip\"",
        "",
        &[("roomy", 10, "1m"), ("tight", 3, "1h")],
    )
    .replace("path = \"/*\"", "path = \"/two/*\"");
    let gw = on_redis(&redis, &prefix, &up.url(), &format!("{r2}\n{r1}")).await;
    let client = HttpClient::default();
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(client.get(&gw.url("/one"), &[]).await.status.as_u16());
    }
    assert_eq!(statuses, [200, 200, 429, 429, 429, 429]);
    let zcard = |key: &str| redis.cmd(&["ZCARD", key]).int();
    let r1_sets = observe::keys(&redis, &prefix);
    let route_set = format!("{prefix}:{{r1|127.0.0.1}}#log");
    let big_set = r1_sets
        .iter()
        .find(|k| k.starts_with(&format!("{prefix}:{{r1~")) && k.ends_with("|GET}#log"))
        .unwrap_or_else(|| panic!("no sorted set for `big`'s own key: {r1_sets:?}"));
    assert_eq!(zcard(&route_set), 2, "{r1_sets:?}");
    assert_eq!(
        zcard(big_set),
        2,
        "rejections by `small` must not charge `big`"
    );
    let usage = client
        .get(
            &gw.admin("/admin/usage?route=r1&limit=big&key=GET"),
            &[("authorization", &format!("Bearer {TOKEN}"))],
        )
        .await
        .json();
    assert_eq!(usage["limits"][0]["name"], "big", "{usage}");
    assert_eq!(usage["limits"][0]["used"], 2, "{usage}");

    for _ in 0..5 {
        client.get(&gw.url("/two/x"), &[]).await;
    }
    let r2_set = format!("{prefix}:{{r2|127.0.0.1}}#log");
    let r2_keys: Vec<String> = observe::keys(&redis, &prefix)
        .into_iter()
        .filter(|k| k.starts_with(&format!("{prefix}:{{r2")))
        .collect();
    assert_eq!(
        r2_keys,
        std::slice::from_ref(&r2_set),
        "both limits of r2 count the same key: one sorted set"
    );
    assert_eq!(
        zcard(&r2_set),
        3,
        "each allowed request recorded once, the 2 refused by `tight` not at all"
    );
    let usage = client
        .get(
            &gw.admin("/admin/usage?route=r2&key=127.0.0.1"),
            &[("authorization", &format!("Bearer {TOKEN}"))],
        )
        .await
        .json();
    let used: Vec<(&str, u64)> = usage["limits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["name"].as_str().unwrap(), l["used"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        used,
        [("roomy", 3), ("tight", 3)],
        "rejections by `tight` must not charge `roomy`"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn script_flush_during_traffic_causes_no_5xx() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    // on_error = "deny": any NOSCRIPT that leaked out of the store would show as a 503.
    let routes = route(
        "busy",
        "\"route\"",
        "on_error = \"deny\"",
        &[("roomy", 10_000, "1m")],
    );
    let gw = on_redis(&redis, &unique_prefix("flush"), &up.url(), &routes).await;
    let client = HttpClient::default();
    let url = gw.url("/x");
    let traffic = tokio::spawn(async move {
        let mut statuses = Vec::new();
        for _ in 0..300 {
            statuses.push(client.get(&url, &[]).await.status.as_u16());
        }
        statuses
    });
    for _ in 0..15 {
        assert_eq!(redis.cmd(&["SCRIPT", "FLUSH"]), Resp::Simple("OK".into()));
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    let statuses = traffic.await.unwrap();
    assert!(statuses.iter().all(|&s| s == 200), "statuses: {statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_mode_rejects_the_key_for_block_for() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let routes = route(
        "otp",
        "\"ip\"",
        "on_exceed = \"block\"\nblock_for = \"2s\"",
        &[("per-second", 2, "1s")],
    );
    let gw = on_redis(&redis, &unique_prefix("block"), &up.url(), &routes).await;
    let client = HttpClient::default();
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(client.get(&gw.url("/otp"), &[]).await);
    }
    let codes: Vec<u16> = statuses.iter().map(|r| r.status.as_u16()).collect();
    assert_eq!(codes, [200, 200, 429, 429, 429]);
    let first_block = &statuses[2];
    let started = Instant::now();
    assert_eq!(first_block.header("retry-after"), Some("2"));
    assert!(first_block.json()["retry_after_ms"].as_u64().unwrap() > 1500);
    assert_eq!(first_block.json()["block_level"], 1, "{}", first_block.body);
    // The window (1s) has room again long before the block (2s) lapses: still rejected.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let during = client.get(&gw.url("/otp"), &[]).await;
    assert_eq!(during.status, 429);
    assert_eq!(
        during.header("retry-after"),
        Some("1"),
        "remaining block time"
    );
    tokio::time::sleep_until((started + Duration::from_millis(2100)).into()).await;
    assert_eq!(
        client.get(&gw.url("/otp"), &[]).await.status,
        200,
        "the block lapsed"
    );
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert!(
        metrics.contains("slidegate_requests_total{decision=\"rejected\",route=\"otp\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("slidegate_requests_total{decision=\"blocked\",route=\"otp\"} 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("slidegate_limit_exceeded_total{limit=\"per-second\",mode=\"enforced\",route=\"otp\"} 4"),
        "{metrics}"
    );
}

/// Waits until `ms` milliseconds (plus a margin) after `from`: a retry at the time a 429 named.
async fn wait_after(from: Instant, ms: u64) {
    tokio::time::sleep_until((from + Duration::from_millis(ms + 60)).into()).await;
}

/// `Retry-After` on a blocking route is the remaining block time, or the window's wait if later
/// (SPEC section 5): when the window keeps the key out longer than `block_for`, `Retry-After`
/// says so, the key stays refused past `block_for`, and a client that waits it is let in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_of_a_block_is_the_window_wait_when_that_is_later() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let routes = route(
        "slow",
        "\"ip\"",
        "on_exceed = \"block\"\nblock_for = \"1s\"",
        &[("per-3s", 1, "3s")],
    );
    let gw = on_redis(&redis, &unique_prefix("longwait"), &up.url(), &routes).await;
    let client = HttpClient::default();
    assert_eq!(client.get(&gw.url("/x"), &[]).await.status, 200);
    let refused = client.get(&gw.url("/x"), &[]).await;
    let received = Instant::now();
    assert_eq!(refused.status, 429);
    assert_eq!(
        refused.header("retry-after"),
        Some("3"),
        "the window's wait"
    );
    let retry_ms = refused.json()["retry_after_ms"].as_u64().unwrap();
    assert!((2_500..=3_000).contains(&retry_ms), "{}", refused.body);
    // Past block_for, before the window has room: still refused, counting down to one instant.
    wait_after(received, 1_200).await;
    let during = client.get(&gw.url("/x"), &[]).await;
    assert_eq!(during.status, 429);
    assert_eq!(during.header("retry-after"), Some("2"), "{}", during.body);
    wait_after(received, retry_ms).await;
    assert_eq!(
        client.get(&gw.url("/x"), &[]).await.status,
        200,
        "a client that waited Retry-After is allowed"
    );
}

/// Escalating blocks: the n-th block of a key lasts `block_for * block_growth^(n-1)`, at most
/// `block_max`, its level in the 429 body; after `block_forget` of quiet past a block's end the
/// next block is the first again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_grow_up_to_block_max_and_are_forgotten_after_block_forget() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let routes = route(
        "login",
        "\"ip\"",
        "on_exceed = \"block\"\nblock_for = \"1s\"\nblock_growth = 2\nblock_max = \"2s\"\nblock_forget = \"1s\"",
        &[("per-second", 1, "1s")],
    );
    let gw = on_redis(&redis, &unique_prefix("grow"), &up.url(), &routes).await;
    let client = HttpClient::default();
    // Each round: one allowed request, then the exceed that starts the next block.
    let mut blocks = Vec::new();
    let mut ends = Instant::now();
    for round in 0..3 {
        wait_after(ends, 0).await;
        let allowed = client.get(&gw.url("/login"), &[]).await;
        assert_eq!(allowed.status, 200, "round {round}: {}", allowed.body);
        let refused = client.get(&gw.url("/login"), &[]).await;
        ends = Instant::now();
        assert_eq!(refused.status, 429, "round {round}");
        let body = refused.json();
        let retry_ms = body["retry_after_ms"].as_u64().unwrap();
        ends += Duration::from_millis(retry_ms);
        blocks.push((
            body["block_level"].as_u64().unwrap(),
            refused.header("retry-after").unwrap().to_string(),
        ));
    }
    assert_eq!(
        blocks,
        [(1, "1".into()), (2, "2".into()), (3, "2".into())],
        "1 s, then 2 s, then capped at block_max (2 s)"
    );
    // Quiet for block_forget past the last block's end: the next block is the first again.
    wait_after(ends, 1_000).await;
    assert_eq!(client.get(&gw.url("/login"), &[]).await.status, 200);
    let refused = client.get(&gw.url("/login"), &[]).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.json()["block_level"], 1, "{}", refused.body);
    assert_eq!(refused.header("retry-after"), Some("1"));
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert_eq!(
        support::metrics::value(
            &metrics,
            "slidegate_blocks_started_total",
            &[("route", "login"), ("limit", "per-second")],
        ),
        Some(4.0),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_counts_but_never_rejects() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let routes = route(
        "dry",
        "\"ip\"",
        "on_exceed = \"shadow\"",
        &[("per-minute", 2, "1m")],
    );
    let gw = on_redis(&redis, &unique_prefix("shadow"), &up.url(), &routes).await;
    let client = HttpClient::default();
    for _ in 0..5 {
        assert_eq!(client.get(&gw.url("/x"), &[]).await.status, 200);
    }
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert!(
        metrics.contains("slidegate_requests_total{decision=\"allowed\",route=\"dry\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("slidegate_requests_total{decision=\"shadow_rejected\",route=\"dry\"} 3"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delay_mode_waits_for_room_within_max_delay() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let routes = route(
        "payments",
        "\"route\"",
        "on_exceed = \"delay\"\nmax_delay = \"1500ms\"\nmax_waiting = 100",
        &[("per-second", 5, "1s")],
    );
    let gw = on_redis(&redis, &unique_prefix("delay"), &up.url(), &routes).await;
    let client = HttpClient::default();
    let results = client.get_concurrently(vec![gw.url("/pay"); 10]).await;
    assert!(results.iter().all(|(s, _)| *s == 200), "{results:?}");
    let late = results
        .iter()
        .filter(|(_, t)| *t >= Duration::from_millis(800))
        .count();
    assert_eq!(
        late, 5,
        "half of them must have waited about a second: {results:?}"
    );
    // Far over the limit: 15 more cannot all fit within 1.5 s at 5/s.
    let statuses: Vec<u16> = client
        .get_concurrently(vec![gw.url("/pay"); 15])
        .await
        .into_iter()
        .map(|r| r.0)
        .collect();
    assert!(
        statuses.contains(&429) && statuses.contains(&200),
        "{statuses:?}"
    );
    // Every request that got through after the first five waited: 5 of the first ten, and
    // every 200 of the fifteen (the window was full when they came).
    let passed_late = statuses.iter().filter(|s| **s == 200).count() as f64;
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    let count = |decision: &str| {
        support::metrics::value(
            &metrics,
            "slidegate_requests_total",
            &[("route", "payments"), ("decision", decision)],
        )
    };
    assert_eq!(count("delayed"), Some(5.0 + passed_late), "{metrics}");
    assert_eq!(count("allowed"), Some(5.0), "{metrics}");
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

fn evalsha_calls(redis: &RedisServer) -> i64 {
    let Resp::Bulk(Some(info)) = redis.cmd(&["INFO", "commandstats"]) else {
        panic!("INFO failed")
    };
    info.lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

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
    let before = evalsha_calls(&redis);
    for _ in 0..200 {
        let r = client.get(&gw.url("/login"), &[]).await;
        assert_eq!(r.status, 429);
        assert!(r.header("retry-after").is_some() && r.header("ratelimit").is_some());
    }
    assert_eq!(
        evalsha_calls(&redis),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delay_mode_bounds_the_waiting_room() {
    let redis = RedisServer::start();
    let up = upstream::start().await;
    let routes = route(
        "capped",
        "\"route\"",
        "on_exceed = \"delay\"\nmax_delay = \"5s\"\nmax_waiting = 2",
        &[("per-second", 1, "1s")],
    );
    let gw = on_redis(&redis, &unique_prefix("room"), &up.url(), &routes).await;
    let client = HttpClient::default();
    assert_eq!(client.get(&gw.url("/pay"), &[]).await.status, 200);
    let mut results = client.get_concurrently(vec![gw.url("/pay"); 5]).await;
    results.sort();
    let codes: Vec<u16> = results.iter().map(|r| r.0).collect();
    assert_eq!(codes, [200, 200, 429, 429, 429], "{results:?}");
    let rejected_fast = results
        .iter()
        .filter(|r| r.0 == 429)
        .all(|r| r.1 < Duration::from_millis(500));
    assert!(
        rejected_fast,
        "beyond max_waiting the answer is immediate: {results:?}"
    );
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    assert!(
        metrics.contains("slidegate_requests_total{decision=\"delayed\",route=\"capped\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("slidegate_requests_total{decision=\"rejected\",route=\"capped\"} 3"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_whose_client_gave_up_is_still_counted() {
    // Redis charges a decision even when the client that asked gives up before the answer
    // arrives; the metrics must count it, or Redis and /metrics disagree.
    let redis = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    let up = upstream::start().await;
    let prefix = unique_prefix("orphan");
    let store =
        redis_store(&redis.url(), &prefix).replace("timeout = \"200ms\"", "timeout = \"3s\"");
    let gw = gateway::start(&config(
        &store,
        &up.url(),
        &route("r", "\"route\"", "", &[("per-hour", 100, "1h")]),
    ))
    .await;
    let addr = gw.running().proxy_addr;
    // Freeze Redis for 600 ms from another connection, then ask while it is frozen.
    let port = redis.port;
    let freezer = std::thread::spawn(move || {
        let reply = RedisServer::attach(port).cmd(&["DEBUG", "SLEEP", "0.6"]);
        assert_eq!(reply, Resp::Simple("OK".into()));
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    {
        // An h2 client that gives up on its request: the stream is reset and the server drops
        // the request while its decision waits for the frozen Redis.
        let io = hyper_util::rt::TokioIo::new(tokio::net::TcpStream::connect(addr).await.unwrap());
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                .await
                .unwrap();
        tokio::spawn(connection);
        let req = http::Request::get(format!("http://{addr}/x"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let gave_up =
            tokio::time::timeout(Duration::from_millis(150), sender.send_request(req)).await;
        assert!(
            gave_up.is_err(),
            "the request was meant to be waiting on Redis: {gave_up:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    freezer.join().unwrap();
    let client = HttpClient::default();
    let key = format!("{prefix}:{{r|r}}#log");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
        let counted =
            metrics.contains("slidegate_requests_total{decision=\"allowed\",route=\"r\"} 1");
        let charged = redis.cmd(&["ZCARD", &key]).int();
        if counted && charged == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Redis charged {charged}, /metrics counted: {counted}\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gw.stop().await;
}

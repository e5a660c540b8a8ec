//! The recipe `examples/login.toml`, run as written (`support/recipes.rs`), against the attacks its
//! comments describe: credential stuffing against one account between a real user's logins, a
//! success forgiving failures, blocks that escalate up to a day, one IP failing across many
//! accounts. Each test checks what the recipe promises, in the gateway's answers, in Redis, in the
//! upstream and in the metrics.

use crate::support;

use std::time::Instant;

use support::http::HttpClient;
use support::recipes::{
    all_keys, assert_quiet_429, count, ip, post_as, requests, AuthUpstream, Recipe,
};
use support::redis::{RedisServer, Resp};

fn login(user: &str, password: &str) -> String {
    serde_json::json!({ "username": user, "password": password }).to_string()
}

/// A credential-stuffing run against one account, from a new IP each time, between the
/// logins of a real user: the account is blocked after exactly 5 failures, and from then on
/// nothing reaches the upstream, not even the right password; the real user's successes count
/// nothing. The 429 names the block's level, says nothing about the quota, and its Retry-After is
/// the time until the first failure leaves the 15-minute window (which outlasts the first,
/// 1-minute block: README, "the remaining block time, or the window's wait, if later").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_stuffing_blocks_an_account_after_exactly_five_failures() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = Recipe::start("login.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let url = gw.url("/api/login");
    let started = Instant::now();
    let mut victim = Vec::new();
    let mut last = None;
    for i in 0..12u32 {
        // the real user logs in between the bot's attempts, from one IP
        let r = post_as(&client, &url, "192.0.2.50", &login("alice", "right")).await;
        assert_eq!(r.status, 200, "alice: {}", r.body);
        // the bot: spelled in any case, the username is one account
        let user = if i % 2 == 0 { "Victim" } else { "victim" };
        let password = if i == 11 { "right" } else { "guess" };
        let r = post_as(&client, &url, &ip(i), &login(user, password)).await;
        victim.push(r.status.as_u16());
        if r.status == 429 {
            last = Some(r);
        }
    }
    let elapsed_ms = started.elapsed().as_millis() as u64 + 1;
    assert_eq!(
        victim,
        [401, 401, 401, 401, 401, 429, 429, 429, 429, 429, 429, 429]
    );
    let to_upstream = upstream.texts("/api/login");
    assert_eq!(
        to_upstream.iter().filter(|b| b.contains("ictim")).count(),
        5,
        "nothing of a blocked account reaches the upstream"
    );
    let body = assert_quiet_429(&last.unwrap(), "failed-logins");
    assert_eq!(body["block_level"], 1, "{body}");
    let retry_ms = body["retry_after_ms"].as_u64().unwrap();
    assert!(
        (900_000 - elapsed_ms..=900_000).contains(&retry_ms),
        "retry_after_ms {retry_ms} after {elapsed_ms} ms"
    );

    let alice = gw.admin_get("/admin/usage?route=login&key=alice").await;
    assert_eq!(alice["limits"][0]["used"], 0, "{alice}");
    assert_eq!(alice["blocked_ms"], 0, "{alice}");
    let v = gw.admin_get("/admin/usage?route=login&key=victim").await;
    // the block started after `started`, so at most this much of it has passed
    let read_ms = started.elapsed().as_millis() as u64 + 1;
    assert_eq!(v["limits"][0]["used"], 5, "{v}");
    assert_eq!(v["block_level"], 1, "{v}");
    let blocked_ms = v["blocked_ms"].as_u64().unwrap();
    assert!(
        (60_000 - read_ms..=60_000).contains(&blocked_ms),
        "the first block lasts 1 minute: {v}"
    );
    let blocked = gw.admin_get("/admin/blocked?route=login").await;
    let listed: Vec<&str> = blocked["blocked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["key"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["victim"], "{blocked}");

    let m = gw.metrics().await;
    assert_eq!(requests(&m, "login", "allowed"), 12.0 + 5.0);
    assert_eq!(
        requests(&m, "login", "rejected"),
        1.0,
        "the exceed that starts the block"
    );
    assert_eq!(
        requests(&m, "login", "blocked"),
        6.0,
        "the 429s during the block"
    );
    let started_blocks = count(
        &m,
        "slidegate_blocks_started_total",
        &[("route", "login"), ("limit", "failed-logins")],
    );
    assert_eq!(started_blocks, 1.0);
    gw.stop().await;
}

/// A successful login forgives the account's earlier failures: after 4 failures and a 200,
/// 5 more failures are let through before the block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_a_success_forgives_earlier_failures() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = Recipe::start("login.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let url = gw.url("/api/login");
    let mut statuses = Vec::new();
    for (n, password) in [
        "a", "b", "c", "d", "right", "e", "f", "g", "h", "i", "right",
    ]
    .into_iter()
    .enumerate()
    {
        let r = post_as(&client, &url, &ip(n as u32), &login("bob", password)).await;
        statuses.push(r.status.as_u16());
        if n == 3 {
            let u = gw.admin_get("/admin/usage?route=login&key=bob").await;
            assert_eq!(u["limits"][0]["used"], 4, "{u}");
        }
        if n == 4 {
            let u = gw.admin_get("/admin/usage?route=login&key=bob").await;
            assert_eq!(u["limits"][0]["used"], 0, "the success forgave: {u}");
        }
    }
    assert_eq!(
        statuses,
        [401, 401, 401, 401, 200, 401, 401, 401, 401, 401, 429]
    );
    let m = gw.metrics().await;
    let resets = count(
        &m,
        "slidegate_outcome_resets_total",
        &[("route", "login"), ("limit", "failed-logins")],
    );
    assert_eq!(resets, 1.0);
    gw.stop().await;
}

/// The block marker of a key (`<prefix>:{login|<key>}#block`: "<limit> <end µs> <level>") and
/// Redis's clock in µs.
fn marker(redis: &RedisServer, key: &str) -> (String, u64, u64, u64) {
    let name = format!("slidegate:{{login|{key}}}#block");
    let Resp::Bulk(Some(text)) = redis.cmd(&["GET", &name]) else {
        panic!("no block marker {name}: {:?}", all_keys(redis))
    };
    let mut parts = text.split(' ');
    let limit = parts.next().unwrap().to_string();
    let end: u64 = parts.next().unwrap().parse().unwrap();
    let level: u64 = parts.next().unwrap().parse().unwrap();
    (limit, end, level, redis_now_us(redis))
}

fn redis_now_us(redis: &RedisServer) -> u64 {
    let Resp::Array(time) = redis.cmd(&["TIME"]) else {
        panic!("TIME")
    };
    let part = |i: usize| match &time[i] {
        Resp::Bulk(Some(s)) => s.parse::<u64>().unwrap(),
        other => panic!("TIME {other:?}"),
    };
    part(0) * 1_000_000 + part(1)
}

/// Ends the key's block now, as the passing of its time would: the marker keeps its level and
/// its expiry (`block_forget` after the end), only its end moves to the past. A reload then
/// clears the instance's deny cache, which would otherwise answer the key for the rest of the
/// window without asking Redis.
async fn lapse_block(gw: &Recipe, redis: &RedisServer, key: &str) {
    let (limit, _, level, now) = marker(redis, key);
    let name = format!("slidegate:{{login|{key}}}#block");
    let lapsed = format!("{limit} {} {level}", now - 1_000);
    assert_eq!(
        redis.cmd(&["SET", &name, &lapsed, "KEEPTTL"]),
        Resp::Simple("OK".into())
    );
    gw.reload().await;
    let u = gw
        .admin_get(&format!("/admin/usage?route=login&key={key}"))
        .await;
    assert_eq!(u["blocked_ms"], 0, "the block lapsed: {u}");
}

/// Each next block of an account lasts twice as long (1, 2, 4 minutes ... up to a day), and the
/// level is kept for a day after a block's end. Without waiting minutes: the store's block
/// marker (end and level, read with Redis's own clock) shows each block's length, and a block
/// is made to lapse by moving the marker's end to the past, as time would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_blocks_escalate_twice_as_long_up_to_a_day() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = Recipe::start("login.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let url = gw.url("/api/login");
    for n in 0..5 {
        let r = post_as(&client, &url, &ip(n), &login("carol", "guess")).await;
        assert_eq!(r.status, 401);
    }
    // (level, block length in ms): 1 minute, then twice as long each time
    let mut lengths = Vec::new();
    for round in 0..3u32 {
        if round > 0 {
            lapse_block(&gw, &redis, "carol").await;
        }
        let r = post_as(&client, &url, &ip(10 + round), &login("carol", "guess")).await;
        let body = assert_quiet_429(&r, "failed-logins");
        let (limit, end, level, now) = marker(&redis, "carol");
        assert_eq!(limit, "failed-logins");
        assert_eq!(body["block_level"], level, "{body}");
        lengths.push((level, (end - now).div_ceil(1000)));
        let pttl = redis.cmd(&["PTTL", "slidegate:{login|carol}#block"]).int() as u64;
        let block_ms = (end - now) / 1000;
        assert!(
            pttl > block_ms + 86_400_000 - 5_000 && pttl <= block_ms + 86_400_000 + 1_000,
            "the level is kept a day (block_forget) past the block's end: pttl {pttl}"
        );
    }
    // each length read a moment after its block started: within a few seconds of its nominal
    for ((level, ms), (want_level, nominal)) in
        lengths
            .iter()
            .zip([(1, 60_000u64), (2, 120_000), (3, 240_000)])
    {
        assert_eq!(*level, want_level, "{lengths:?}");
        assert!(
            *ms <= nominal && *ms > nominal - 5_000,
            "level {level}: {ms} ms, nominal {nominal}: {lengths:?}"
        );
    }
    // block_max = 1d: the 12th block would be 2^11 minutes; it lasts a day, and Retry-After
    // says so (the block now outlasts the window's own wait)
    let name = "slidegate:{login|carol}#block";
    let now = redis_now_us(&redis);
    assert_eq!(
        redis.cmd(&[
            "SET",
            name,
            &format!("failed-logins {} 11", now - 1_000),
            "KEEPTTL"
        ]),
        Resp::Simple("OK".into())
    );
    gw.reload().await;
    let r = post_as(&client, &url, &ip(20), &login("carol", "guess")).await;
    let body = assert_quiet_429(&r, "failed-logins");
    assert_eq!(body["block_level"], 12, "{body}");
    let retry_ms = body["retry_after_ms"].as_u64().unwrap();
    assert!(
        retry_ms <= 86_400_000 && retry_ms > 86_400_000 - 5_000,
        "the longest block is block_max: {body}"
    );
    let m = gw.metrics().await;
    let started_blocks = count(
        &m,
        "slidegate_blocks_started_total",
        &[("route", "login"), ("limit", "failed-logins")],
    );
    assert_eq!(started_blocks, 4.0);
    gw.stop().await;
}

/// One IP may fail 100 logins an hour across any accounts; its successes count nothing. And a
/// body without a username is refused (on_missing_key = "reject"), never counted by an IP a bot
/// rotates, and never reaches the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_one_ip_fails_a_hundred_times_an_hour_and_successes_do_not_count() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = Recipe::start("login.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let url = gw.url("/api/login");
    let bot = "203.0.113.66";
    for n in 0..100u32 {
        // one failure per account, and between them successful logins from the same IP
        let r = post_as(&client, &url, bot, &login(&format!("user{n}"), "guess")).await;
        assert_eq!(r.status, 401, "failure {n}: {}", r.body);
        if n % 4 == 0 {
            let r = post_as(&client, &url, bot, &login(&format!("happy{n}"), "right")).await;
            assert_eq!(r.status, 200, "success {n}: {}", r.body);
        }
    }
    let sent = upstream.bodies("/api/login").len();
    assert_eq!(sent, 125);
    let r = post_as(&client, &url, bot, &login("user100", "guess")).await;
    let body = assert_quiet_429(&r, "per-ip");
    assert_eq!(body["block_level"], 1, "{body}");
    // the IP is blocked, whatever the account and password
    let r = post_as(&client, &url, bot, &login("happy1000", "right")).await;
    assert_eq!(r.status, 429);
    assert_eq!(upstream.bodies("/api/login").len(), sent);
    let per_ip = gw
        .admin_get(&format!("/admin/usage?route=login&limit=per-ip&key={bot}"))
        .await;
    assert_eq!(per_ip["limits"][0]["used"], 100, "{per_ip}");
    // another IP is untouched
    let r = post_as(&client, &url, "203.0.113.67", &login("user100", "guess")).await;
    assert_eq!(r.status, 401);

    // no username: refused before the upstream, however often
    let nameless = "203.0.113.68";
    let before = upstream.bodies("/api/login").len();
    for _ in 0..6 {
        let r = post_as(&client, &url, nameless, "{\"password\":\"guess\"}").await;
        assert_eq!(r.status, 400, "{}", r.body);
        assert_eq!(r.json()["error"], "missing_key", "{}", r.body);
    }
    assert_eq!(upstream.bodies("/api/login").len(), before);
    gw.stop().await;
}

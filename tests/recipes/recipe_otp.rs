//! The recipe `examples/otp.toml`, run as written (`support/recipes.rs`), against the attacks its
//! comments describe: one number in every spelling from rotating IPs, one IP asking codes for many
//! numbers, a whole operator range, and its Redis gone. Each test checks what the recipe promises,
//! in the gateway's answers, in Redis, in the upstream and in the metrics.

use crate::support;

use std::time::Instant;

use support::http::HttpClient;
use support::recipes::{
    all_keys, assert_quiet_429, count, ip, post_as, requests, AuthUpstream, Recipe, QUIET, SECRET,
};
use support::redis::RedisServer;

/// The 16 bytes of HMAC-SHA256 of `value` under `secret`, in hex (the README's "Protecting OTP and login endpoints", `hash = true`).
fn hmac_hex(secret: &str, value: &str) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = <Hmac<sha2::Sha256>>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(value.as_bytes());
    let digest = mac.finalize().into_bytes();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

fn otp(phone: &str) -> String {
    serde_json::json!({ "phone": phone }).to_string()
}

/// The SMS-pumping bot of the OTP recipe: one number, spelled every way a number can be, from a
/// new IP each time. Exactly 3 codes go out (per-phone, 3 per 10 minutes); the number reaches
/// Redis only hashed; the 429s say nothing about the quota but keep Retry-After, which is the
/// exact wait until the first code leaves the 10-minute window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otp_one_number_in_every_spelling_from_rotating_ips_gets_three_codes() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = Recipe::start("otp.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let url = gw.url("/api/otp/send");
    // One number: +62 812-3456-7890 (Indonesia, region ID in the recipe).
    let spellings = [
        "0812-3456-7890",
        "+62 812 3456 7890",
        "6281234567890",
        "008 62 812 3456 7890",
        "(0812) 3456.7890",
        "+6281234567890",
        "081234567890",
    ];
    let started = Instant::now();
    let mut statuses = Vec::new();
    let mut last = None;
    for i in 0..28u32 {
        let r = post_as(
            &client,
            &url,
            &ip(i),
            &otp(spellings[i as usize % spellings.len()]),
        )
        .await;
        statuses.push(r.status.as_u16());
        if r.status == 200 {
            for name in QUIET {
                assert!(r.header(name).is_none(), "{name} on an allowed response");
            }
        } else {
            last = Some(r);
        }
    }
    let elapsed_ms = started.elapsed().as_millis() as u64 + 1;
    let mut expected = vec![200u16; 3];
    expected.resize(28, 429);
    assert_eq!(statuses, expected);
    assert_eq!(
        upstream.bodies("/api/otp/send").len(),
        3,
        "exactly 3 codes sent"
    );

    let last = last.unwrap();
    let body = assert_quiet_429(&last, "per-phone");
    // The first code leaves the window 10 minutes after it was counted, which was after this
    // test started: the wait is at most 10 minutes and at least 10 minutes less the test's time.
    let retry_ms = body["retry_after_ms"].as_u64().unwrap();
    assert!(
        (600_000 - elapsed_ms..=600_000).contains(&retry_ms),
        "retry_after_ms {retry_ms} after {elapsed_ms} ms"
    );

    // hash = true: the per-phone set is named by the number's HMAC, and holds the 3 codes; the
    // number itself is in no key (the per-operator key holds only its first 6 characters).
    let hashed = hmac_hex(SECRET, "+6281234567890");
    let keys = all_keys(&redis);
    let phone_set = keys
        .iter()
        .find(|k| k.ends_with(&format!("|{hashed}}}#log")))
        .unwrap_or_else(|| panic!("no per-phone set of the hashed number in {keys:?}"));
    assert_eq!(redis.cmd(&["ZCARD", phone_set]).int(), 3);
    for raw in ["6281234567890", "81234567890", "34567890"] {
        assert!(
            keys.iter().all(|k| !k.contains(raw)),
            "the raw number reached Redis: {keys:?}"
        );
    }
    let operator_set = keys
        .iter()
        .find(|k| k.ends_with("|+62812}#log"))
        .unwrap_or_else(|| panic!("no per-operator set in {keys:?}"));
    assert_eq!(redis.cmd(&["ZCARD", operator_set]).int(), 3);

    let m = gw.metrics().await;
    assert_eq!(requests(&m, "otp-send", "allowed"), 3.0);
    assert_eq!(requests(&m, "otp-send", "rejected"), 25.0);
    assert_eq!(
        count(
            &m,
            "slidegate_limit_exceeded_total",
            &[
                ("route", "otp-send"),
                ("limit", "per-phone"),
                ("mode", "enforced")
            ]
        ),
        25.0
    );
    gw.stop().await;
}

/// One IP asking codes for many numbers gets 20 an hour (per-ip), then 429s naming per-ip; the
/// refused requests charge nothing (another IP can still send a code to a number the first one
/// was refused for); a body without a phone is refused with 400 and counted as `bad_request`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otp_one_ip_gets_twenty_codes_an_hour_and_a_body_without_a_phone_is_refused() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = Recipe::start("otp.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let url = gw.url("/api/otp/send");
    let number = |n: u32| format!("0812-3456-{n:04}");
    let mut allowed = 0;
    for n in 0..25 {
        let r = post_as(&client, &url, "203.0.113.9", &otp(&number(n))).await;
        if n < 20 {
            assert_eq!(r.status, 200, "code {n}: {}", r.body);
            allowed += 1;
        } else {
            let body = assert_quiet_429(&r, "per-ip");
            let retry_ms = body["retry_after_ms"].as_u64().unwrap();
            assert!(retry_ms > 3_500_000 && retry_ms <= 3_600_000, "{body}");
        }
    }
    assert_eq!(allowed, 20);
    // number 24 was refused to 203.0.113.9 and charged nowhere: it still has all 3 codes
    for i in 0..3 {
        let r = post_as(&client, &url, &ip(i), &otp(&number(24))).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(upstream.bodies("/api/otp/send").len(), 23);

    // no phone: refused before any limit, counted as bad_request, never upstream
    for (what, body) in [
        ("no member", "{\"to\":\"0812-3456-7890\"}".to_string()),
        ("not a number", otp("call me")),
        ("not JSON", "phone=081234567890".to_string()),
    ] {
        let r = post_as(&client, &url, "203.0.113.10", &body).await;
        assert_eq!(r.status, 400, "{what}: {}", r.body);
        assert_eq!(r.json()["error"], "missing_key", "{what}");
    }
    assert_eq!(upstream.bodies("/api/otp/send").len(), 23);
    let m = gw.metrics().await;
    assert_eq!(requests(&m, "otp-send", "bad_request"), 3.0);
    assert_eq!(requests(&m, "otp-send", "allowed"), 23.0);
    assert_eq!(requests(&m, "otp-send", "rejected"), 5.0);
    gw.stop().await;
}

/// A whole operator range (`+62812`, the first 6 characters) gets 500 codes an hour whatever
/// the numbers and IPs; another range is not touched by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otp_one_number_range_gets_five_hundred_codes_an_hour() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = Recipe::start("otp.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let url = gw.url("/api/otp/send");
    for n in 0..500u32 {
        let r = post_as(&client, &url, &ip(n), &otp(&format!("0812-3456-{n:04}"))).await;
        assert_eq!(r.status, 200, "code {n}: {}", r.body);
    }
    let r = post_as(&client, &url, &ip(500), &otp("0812-3456-9999")).await;
    assert_quiet_429(&r, "per-operator");
    let r = post_as(&client, &url, &ip(501), &otp("0813-3456-9999")).await;
    assert_eq!(r.status, 200, "another range: {}", r.body);
    assert_eq!(upstream.bodies("/api/otp/send").len(), 501);
    gw.stop().await;
}

/// The OTP recipe fails closed: with its Redis gone, a request gets 503 with `Retry-After: 1`,
/// counted as `store_error_denied`, and no code is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otp_fails_closed_when_redis_is_gone() {
    let mut redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = Recipe::start("otp.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let url = gw.url("/api/otp/send");
    let r = post_as(&client, &url, &ip(1), &otp("0812-3456-7890")).await;
    assert_eq!(r.status, 200);
    redis.kill();
    let r = post_as(&client, &url, &ip(2), &otp("0812-3456-7891")).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(upstream.bodies("/api/otp/send").len(), 1);
    let m = gw.metrics().await;
    assert_eq!(requests(&m, "otp-send", "store_error_denied"), 1.0);
    gw.stop().await;
}

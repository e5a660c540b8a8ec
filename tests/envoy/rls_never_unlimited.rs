//! Nothing an Envoy request carries turns a limit off: Envoy reads an error from the
//! rate-limit service as "no limit" under its default `failure_mode_deny: false`, so every
//! request that names a domain and a descriptor is decided. A value of any length is counted
//! (keyed by its SHA-256 past 256 bytes), a cost above a limit is OVER_LIMIT for its descriptor
//! and charges nothing (its status naming the limit, and the answer's headers a
//! `Retry-After`), descriptors of different costs are each charged their own, a request with
//! more descriptors matching a limit than are decided at once is refused (those matching none
//! stay OK), and giving units back (`is_negative_hits`) only reads.

use crate::support;

use support::redis::RedisServer;
use support::rls::*;

const LIMITS: &str = r#"
domain: d
descriptors:
  - key: header
    rate_limit: { unit: minute, requests_per_unit: 2, name: per-header }
  - key: tenant
    rate_limit: { unit: minute, requests_per_unit: 10, name: per-tenant }
  - key: ip
    rate_limit: { unit: minute, requests_per_unit: 5, name: per-ip }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_of_any_length_is_counted_as_its_own_key() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-long", LIMITS, "").await;
    let mut c = client(&gw).await;
    // Two values of 64 KiB that share their first 60,000 bytes.
    let common = "v".repeat(60_000);
    let (a, b) = (
        format!("{common}{}", "a".repeat(5536)),
        format!("{common}{}", "b".repeat(5536)),
    );
    let one = request("d", vec![descriptor(&[("header", &a)])]);
    assert_eq!(codes(&ask(&mut c, one.clone()).await), ["OK"]);
    assert_eq!(codes(&ask(&mut c, one.clone()).await), ["OK"]);
    assert_eq!(overall(&ask(&mut c, one).await), "OVER_LIMIT");
    let other = request("d", vec![descriptor(&[("header", &b)])]);
    assert_eq!(ask(&mut c, other).await.statuses[0].limit_remaining, 1);
    // The key is the value's SHA-256, as /admin/usage takes it.
    let hex: String = {
        use sha2::Digest;
        sha2::Sha256::digest(a.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let (name, token) = support::admin::auth();
    let url = gw.admin(&format!(
        "/admin/usage?route=d&limit=per-header&key=%25sha256:{hex}"
    ));
    let usage = support::http::HttpClient::default()
        .get(&url, &[(name, &token)])
        .await;
    assert_eq!(usage.json()["limits"][0]["used"], 2, "{}", usage.body);
    // No raw value of that length reaches Redis.
    let keys = format!("{:?}", redis.cmd(&["KEYS", "*"]));
    assert!(
        !keys.contains(&"v".repeat(300)),
        "{}",
        &keys[..200.min(keys.len())]
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_above_a_limit_is_over_limit_and_charges_nothing() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-cost", LIMITS, "headers = true").await;
    let mut c = client(&gw).await;
    // 11 units against a limit of 10, beside a descriptor that has room.
    let r = ask(
        &mut c,
        request(
            "d",
            vec![
                with_hits(descriptor(&[("tenant", "t1")]), 11),
                with_hits(descriptor(&[("ip", "203.0.113.1")]), 11),
            ],
        ),
    )
    .await;
    assert_eq!(overall(&r), "OVER_LIMIT");
    assert_eq!(codes(&r), ["OVER_LIMIT", "OVER_LIMIT"]);
    // each status names its limit, with nothing left until its window has passed
    let named: Vec<_> = r.statuses.iter().map(current_limit).collect();
    assert_eq!(named, [Some(10), Some(5)]);
    assert_eq!(
        r.statuses[0].current_limit.as_ref().unwrap().name,
        "per-tenant"
    );
    assert_eq!(r.statuses[1].limit_remaining, 0);
    assert_eq!(
        r.statuses[1].duration_until_reset.as_ref().unwrap().seconds,
        60
    );
    assert_eq!(header(&r, "retry-after"), Some("60"), "{r:?}");
    // the headers name the refusing limit, as a refusal by it on the traffic path does
    let policy = header(&r, "ratelimit-policy");
    assert_eq!(policy, Some("\"per-tenant\";q=10;w=60"), "{r:?}");
    let ratelimit = header(&r, "ratelimit");
    assert_eq!(ratelimit, Some("\"per-tenant\";r=0;t=60"), "{r:?}");
    assert_eq!(header(&r, "x-ratelimit-remaining"), Some("0"), "{r:?}");
    // counted as any refusal is: one rejected request, an exceedance of each refusing limit
    let metrics = support::http::HttpClient::default()
        .get(&gw.admin("/metrics"), &[])
        .await
        .body;
    let value = |name: &str, labels: &[(&str, &str)]| {
        support::metrics::value(&metrics, name, labels).unwrap_or(0.0)
    };
    let rejected = [("route", "d"), ("decision", "rejected")];
    assert_eq!(value("slidegate_requests_total", &rejected), 1.0);
    for limit in ["per-tenant", "per-ip"] {
        let labels = [("route", "d"), ("limit", limit), ("mode", "enforced")];
        assert_eq!(
            value("slidegate_limit_exceeded_total", &labels),
            1.0,
            "{limit}"
        );
    }
    let fresh = request(
        "d",
        vec![descriptor(&[("tenant", "t1")]), ip("203.0.113.1")],
    );
    let r = ask(&mut c, fresh).await;
    assert_eq!(r.statuses[0].limit_remaining, 9, "nothing was charged");
    assert_eq!(r.statuses[1].limit_remaining, 4, "nothing was charged");
    gw.stop().await;
}

/// Descriptors whose costs to sliding logs add up past 20,000 units (an entry written per
/// unit) are refused whole and charge nothing; at the bound they are decided, and counters
/// that write no entry per unit are not held to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_log_units_past_one_calls_bound_are_refused_uncharged() {
    const BIG: &str = r#"
domain: d
descriptors:
  - key: log
    rate_limit: { unit: hour, requests_per_unit: 10000, name: per-log }
  - key: counter
    rate_limit:
      { unit: hour, requests_per_unit: 10000, name: per-counter, algorithm: sliding_window_counter }
"#;
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-units", BIG, "").await;
    let mut c = client(&gw).await;
    let costly = |key: &str, values: &[&str]| {
        let descriptors = values
            .iter()
            .map(|v| with_hits(descriptor(&[(key, v)]), 10_000));
        request("d", descriptors.collect())
    };
    let r = ask(&mut c, costly("log", &["a", "b", "c"])).await;
    assert_eq!(codes(&r), ["OVER_LIMIT"; 3], "{r:?}");
    assert_eq!(current_limit(&r.statuses[0]), Some(10_000));
    assert_eq!(redis.cmd(&["DBSIZE"]).int(), 0, "nothing written");
    let r = ask(&mut c, costly("log", &["a", "b"])).await;
    assert_eq!(codes(&r), ["OK"; 2], "20,000 units are decided: {r:?}");
    let r = ask(&mut c, costly("counter", &["a", "b", "c"])).await;
    assert_eq!(
        codes(&r),
        ["OK"; 3],
        "a counter writes no entry per unit: {r:?}"
    );
    // "c" was never charged: its whole limit is left
    let r = ask(&mut c, costly("log", &["c"])).await;
    assert_eq!(codes(&r), ["OK"], "{r:?}");
    assert_eq!(r.statuses[0].limit_remaining, 0);
    gw.stop().await;
}

fn ip(
    address: &str,
) -> envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor {
    descriptor(&[("ip", address)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptors_of_different_costs_are_each_charged_their_own() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-mixed", LIMITS, "").await;
    let mut c = client(&gw).await;
    // Tokens for the tenant, one request for the address.
    let mixed = || {
        request(
            "d",
            vec![
                with_hits(descriptor(&[("tenant", "t2")]), 4),
                with_hits(ip("203.0.113.2"), 1),
            ],
        )
    };
    let r = ask(&mut c, mixed()).await;
    assert_eq!(overall(&r), "OK");
    assert_eq!(r.statuses[0].limit_remaining, 6);
    assert_eq!(r.statuses[1].limit_remaining, 4);
    let r = ask(&mut c, mixed()).await;
    assert_eq!(r.statuses[0].limit_remaining, 2);
    assert_eq!(r.statuses[1].limit_remaining, 3);
    // The tenant has 2 left: 4 more are refused, and the address is not charged for it.
    let r = ask(&mut c, mixed()).await;
    assert_eq!(overall(&r), "OVER_LIMIT");
    let after = ask(&mut c, request("d", vec![with_hits(ip("203.0.113.2"), 0)])).await;
    assert_eq!(after.statuses[0].limit_remaining, 3);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_requests_are_decided_never_an_error() {
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-odd", LIMITS, "").await;
    let mut c = client(&gw).await;
    // More matched descriptors than one decision takes: refused, each naming its limit; a
    // descriptor that matches nothing is still OK with no limit.
    let mut many = vec![ip("203.0.113.3"); 65];
    many.push(descriptor(&[("unknown", "x")]));
    let r = ask(&mut c, request("d", many)).await;
    assert_eq!(overall(&r), "OVER_LIMIT");
    assert_eq!(r.statuses.len(), 66);
    assert_eq!(codes(&r)[..65], ["OVER_LIMIT"; 65]);
    assert_eq!(current_limit(&r.statuses[0]), Some(5));
    assert_eq!(codes(&r)[65], "OK");
    assert_eq!(current_limit(&r.statuses[65]), None);
    let unmatched = request("d", vec![descriptor(&[("unknown", "x")]); 65]);
    let r = ask(&mut c, unmatched).await;
    assert_eq!(overall(&r), "OK", "{r:?}");
    // An override whose unit does not exist, or a limit no algorithm holds exactly (1,000 a
    // year: `limit * window` beyond 2^53 µs).
    for (limit, unit) in [(1, 0), (1, 9), (1_000, 6)] {
        let bad = request("d", vec![with_override(ip("203.0.113.3"), limit, unit)]);
        assert_eq!(
            overall(&ask(&mut c, bad).await),
            "OVER_LIMIT",
            "{limit}/{unit}"
        );
    }
    // Descriptors without entries, with an empty key, with more entries than a tree is deep:
    // they match no limit (OK, no current_limit), beside one that does.
    let loose = request(
        "d",
        vec![
            descriptor(&[]),
            descriptor(&[("", "x")]),
            descriptor(&[("ip", "x"); 20]),
            ip("203.0.113.3"),
        ],
    );
    let r = ask(&mut c, loose).await;
    assert_eq!(codes(&r), ["OK", "OK", "OK", "OK"]);
    assert_eq!(r.statuses[3].limit_remaining, 4);
    // Giving units back is not done: such a descriptor is only read.
    let mut negative = ip("203.0.113.3");
    negative.is_negative_hits = true;
    let r = ask(&mut c, request("d", vec![negative])).await;
    assert_eq!(r.statuses[0].limit_remaining, 4);
    gw.stop().await;
}

/// `ShouldRateLimit` sent as raw bytes; the answer, or the gRPC status when there is none.
async fn raw_call(
    gw: &support::gateway::Gateway,
    message: &[u8],
) -> Result<envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse, String> {
    let addr = gw.running().rls_addr.unwrap();
    let path = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
    let bytes = support::grpc::raw_unary(addr, path, message).await?;
    Ok(prost::Message::decode(&bytes[..]).expect("a RateLimitResponse"))
}

/// A descriptor value that is not UTF-8 (Envoy copies a header's bytes as they came, and HTTP
/// allows bytes above 0x7f in a header) is decided like any other, never an error status that
/// Envoy would read as "no limit".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_that_is_not_utf8_is_decided() {
    use prost::Message;
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-bytes", LIMITS, "").await;
    let mut encoded = request("d", vec![descriptor(&[("header", "bad~~")])]).encode_to_vec();
    let at = encoded.windows(2).position(|w| w == b"~~").unwrap();
    encoded[at..at + 2].copy_from_slice(b"\xff\xfe");
    let mut overall_codes = Vec::new();
    for _ in 0..3 {
        let answer = raw_call(&gw, &encoded)
            .await
            .expect("an answer, not an error");
        overall_codes.push(overall(&answer));
    }
    assert_eq!(overall_codes, ["OK", "OK", "OVER_LIMIT"], "2 a minute");
    gw.stop().await;
}

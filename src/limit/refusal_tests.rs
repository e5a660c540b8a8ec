//! The 429's headers and body, as a client reads them.

use std::time::Duration;

use super::*;
use crate::algorithm::AlgorithmId;
use crate::store::{BlockSpec, LimitUsage, Outcome};

#[test]
fn json_strings_read_back_as_written() {
    for text in [
        "per-minute",
        "",
        "a\"b",
        "back\\slash",
        "tab\tnew\nline\u{1}",
        "plan é ✓",
    ] {
        let mut out = String::new();
        push_json_string(&mut out, text);
        let back: String = serde_json::from_str(&out).expect("valid JSON");
        assert_eq!(back, text, "{out}");
    }
}

/// The 429 parts of route `otp-send`'s tier `tier`: 5 a minute and 20 an hour.
fn refusal(tier: Option<TierName>) -> Refusal {
    let log = AlgorithmId::SLIDING_LOG;
    let set = LimitSet::simple(&[
        ("per-minute", 5, 60_000_000, log),
        ("per-hour", 20, 3_600_000_000, log),
    ]);
    // the tier's `RateLimit-Policy`, as `super::headers::policy_header` writes it
    let policy = HeaderValue::from_static("\"per-minute\";q=5;w=60, \"per-hour\";q=20;w=3600");
    Refusal::new("otp-send", &set, tier.as_ref(), Some(&policy))
}

#[test]
fn rejection_describes_the_rejecting_limit() {
    let d = rejection();
    let r = refusal(None).answer(&d, &RequestId::generate(), true);
    assert_eq!(r.status(), 429);
    let h = r.headers();
    assert_eq!(h["retry-after"], "42");
    assert_eq!(h["ratelimit"], "\"per-minute\";r=0;t=42");
    assert_eq!(h["x-ratelimit-limit"], "5");
    assert_eq!(h["x-ratelimit-remaining"], "0");
    assert_eq!(h["x-ratelimit-reset"], "42");
    assert_eq!(h["content-type"], "application/problem+json");
    let quiet = refusal(None).answer(&d, &RequestId::generate(), false);
    assert_eq!(quiet.headers()["retry-after"], "42");
    for name in [
        "ratelimit",
        "ratelimit-policy",
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
    ] {
        assert!(quiet.headers().get(name).is_none(), "{name}");
    }
}

#[test]
fn the_429_body_is_json_with_every_member() {
    let d = Decision {
        outcome: Outcome::Rejected,
        retry_after: Duration::from_micros(41_250_001),
        limits: vec![
            LimitUsage {
                used: 5,
                limit: 5,
                reset: Duration::from_secs(41),
                retry_after: Duration::from_micros(41_250_001),
                in_flight: false,
            },
            LimitUsage {
                used: 20,
                limit: 20,
                reset: Duration::from_secs(3000),
                retry_after: Duration::from_secs(30),
                in_flight: false,
            },
        ],
        decided_at_us: 0,
        block_level: 3,
        block_left: Duration::ZERO,
        receipt: None,
        approximate: false,
    };
    let t = refusal(Some(TierName::Plan("gold \"quoted\"\n".into())));
    let id = RequestId::generate();
    let r = t.answer(&d, &id, true);
    let body = body_of(r);
    assert_eq!(body["type"], QUOTA_EXCEEDED_TYPE);
    assert_eq!(body["title"], "Too Many Requests");
    assert_eq!(body["status"], 429);
    assert_eq!(body["error"], "rate_limited");
    assert_eq!(body["request_id"], id.as_str());
    assert_eq!(body["route"], "otp-send");
    assert_eq!(body["limit"], "per-minute");
    assert_eq!(body["detail"], "route otp-send: limit per-minute exceeded");
    assert_eq!(
        body["violated-policies"],
        serde_json::json!(["per-minute", "per-hour"])
    );
    assert_eq!(body["retry_after_ms"], 41_251);
    assert_eq!(body["plan"], "gold \"quoted\"\n");
    assert_eq!(body["block_level"], 3);
    assert!(
        body.get("approximate").is_none(),
        "an exact count says nothing"
    );
    let approximate = Decision {
        approximate: true,
        ..d
    };
    let r = t.answer(&approximate, &id, true);
    let body = body_of(r);
    assert_eq!(body["approximate"], true);
    assert_eq!(body["plan"], "gold \"quoted\"\n");
}

/// A rejection by the first limit (the only one exceeded), 41.25 s to wait.
fn rejection() -> Decision {
    Decision {
        outcome: Outcome::Rejected,
        retry_after: Duration::from_millis(41_250),
        limits: vec![
            LimitUsage {
                used: 5,
                limit: 5,
                reset: Duration::from_millis(41_250),
                retry_after: Duration::from_millis(41_250),
                in_flight: false,
            },
            LimitUsage {
                used: 7,
                limit: 20,
                reset: Duration::from_secs(3000),
                retry_after: Duration::ZERO,
                in_flight: false,
            },
        ],
        decided_at_us: 0,
        block_level: 0,
        block_left: Duration::ZERO,
        receipt: None,
        approximate: false,
    }
}

/// Every header of `r`, in the order it is sent.
fn sent(r: &Response<Body>) -> Vec<(String, String)> {
    let values = r.headers().iter();
    let values = values.map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()));
    values.collect()
}

#[test]
fn every_header_is_sent_once_in_order_with_the_decisions_values() {
    let id = RequestId::generate();
    let quiet_id = RequestId::generate();
    let pairs = |list: &[(&str, &str)]| {
        let list = list.iter().map(|(n, v)| (n.to_string(), v.to_string()));
        list.collect::<Vec<_>>()
    };
    let r = refusal(None).answer(&rejection(), &id, true);
    let expected = pairs(&[
        ("content-type", "application/problem+json"),
        ("x-request-id", id.as_str()),
        ("retry-after", "42"),
        (
            "ratelimit-policy",
            "\"per-minute\";q=5;w=60, \"per-hour\";q=20;w=3600",
        ),
        ("ratelimit", "\"per-minute\";r=0;t=42"),
        ("x-ratelimit-limit", "5"),
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "42"),
    ]);
    assert_eq!(sent(&r), expected);
    // a second answer from the same parts carries its own values, not the first one's
    let later = Decision {
        retry_after: Duration::from_millis(9_001),
        ..rejection()
    };
    let later = Decision {
        limits: later
            .limits
            .iter()
            .map(|u| LimitUsage {
                retry_after: u.retry_after.min(Duration::from_millis(9_001)),
                ..u.clone()
            })
            .collect(),
        ..later
    };
    let r = refusal(None).answer(&later, &quiet_id, false);
    let expected = pairs(&[
        ("content-type", "application/problem+json"),
        ("x-request-id", quiet_id.as_str()),
        ("retry-after", "10"),
    ]);
    assert_eq!(sent(&r), expected);
}

#[test]
fn a_decision_naming_no_limit_gets_no_rate_limit_headers() {
    let none = Decision {
        limits: Vec::new(),
        block_level: 2,
        block_left: Duration::ZERO,
        ..rejection()
    };
    let id = RequestId::generate();
    let r = refusal(None).answer(&none, &id, true);
    let names: Vec<String> = sent(&r).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["content-type", "x-request-id", "retry-after"]);
    let body = body_of(r);
    assert_eq!(body["limit"], "per-minute", "the first limit, as before");
    assert_eq!(body["violated-policies"], serde_json::json!([]));
    assert_eq!(body["block_level"], 2);
}

#[test]
fn a_block_that_finds_no_limit_exceeded_still_names_one() {
    // a block the in-process store's overflow sketch serves: no limit's own count refuses
    let mut blocked = rejection();
    blocked.outcome = Outcome::Blocked;
    blocked.block_level = 1;
    blocked.approximate = true;
    for usage in &mut blocked.limits {
        usage.retry_after = Duration::ZERO;
    }
    let body = body_of(refusal(None).answer(&blocked, &RequestId::generate(), true));
    assert_eq!(body["limit"], "per-minute");
    let named = serde_json::json!(["per-minute"]);
    assert_eq!(body["violated-policies"], named, "the limit the body names");
}

#[test]
fn a_name_no_header_can_carry_drops_only_ratelimit() {
    let log = AlgorithmId::SLIDING_LOG;
    let set = LimitSet::simple(&[("bad\u{7f}name", 5, 60_000_000, log)]);
    let policy = HeaderValue::from_static("\"x\";q=5;w=60");
    let refusal = Refusal::new("r\"oute", &set, None, Some(&policy));
    let d = Decision {
        limits: rejection().limits[..1].to_vec(),
        ..rejection()
    };
    let r = refusal.answer(&d, &RequestId::generate(), true);
    // taken out of the template, its place goes to the last header: the order of headers
    // of different names means nothing
    let mut names: Vec<String> = sent(&r).into_iter().map(|(n, _)| n).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "content-type",
            "ratelimit-policy",
            "retry-after",
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
            "x-request-id",
        ]
    );
    let body = body_of(r);
    assert_eq!(body["route"], "r\"oute");
    assert_eq!(body["limit"], "bad\u{7f}name");
    assert_eq!(
        body["detail"],
        "route r\"oute: limit bad\u{7f}name exceeded"
    );
    assert_eq!(
        body["violated-policies"],
        serde_json::json!(["bad\u{7f}name"])
    );
}

/// The JSON body of `r`.
fn body_of(r: Response<Body>) -> serde_json::Value {
    let collected = http_body_util::BodyExt::collect(r.into_body());
    let bytes = futures_util::FutureExt::now_or_never(collected)
        .expect("a body in memory is there at once")
        .expect("a body in memory cannot fail")
        .to_bytes();
    serde_json::from_slice(&bytes).expect("the body is JSON")
}

#[test]
fn a_blocking_routes_refusal_says_its_level_even_when_no_block_started() {
    let id = RequestId::generate();
    let plain = rejection();
    let body = body_of(refusal(None).answer(&plain, &id, true));
    assert!(
        body.get("block_level").is_none(),
        "a rejecting route has none"
    );
    let log = AlgorithmId::SLIDING_LOG;
    let mut set = LimitSet::simple(&[("per-minute", 5, 60_000_000, log)]);
    set.block = Some(BlockSpec {
        block_ms: 60_000,
        growth: 2.0,
        max_ms: 3_600_000,
        forget_ms: 86_400_000,
    });
    let blocking = Refusal::new("login", &set, None, None);
    // a refusal while attempts are in flight starts no block: level 0, said as 0
    let body = body_of(blocking.answer(&plain, &id, true));
    assert_eq!(body["block_level"], 0);
}

#[test]
fn a_costlier_request_refused_is_told_the_quota_left() {
    // 3 of 5 used: a request of cost 3 does not fit, one of cost 2 would
    let mut d = rejection();
    d.limits[0].used = 3;
    let r = refusal(None).answer(&d, &RequestId::generate(), true);
    assert_eq!(r.headers()["ratelimit"], "\"per-minute\";r=2;t=42");
    assert_eq!(r.headers()["x-ratelimit-remaining"], "2");
    // in a block, nothing is left whatever the window says
    d.outcome = Outcome::Blocked;
    let r = refusal(None).answer(&d, &RequestId::generate(), true);
    assert_eq!(r.headers()["x-ratelimit-remaining"], "0");
}

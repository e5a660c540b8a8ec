//! Rate-limit headers and the 429 answer (README, "The traffic path"): `RateLimit-Policy` and `RateLimit`
//! in the IETF httpapi draft's structured-field syntax, the de-facto `X-RateLimit-*` trio,
//! `Retry-After`, and an RFC 9457 problem body with the members of every gateway error
//! (`crate::error`) plus the limit's.

use std::time::Duration;

use axum::body::Body;
use http::header::{HeaderName, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Response, StatusCode};

use super::header_number::number_value;
use super::tier::Tier;
use crate::config::LimitConfig;
use crate::request_id::{RequestId, X_REQUEST_ID};
use crate::store::{Decision, LimitSet};

/// `RateLimit-Policy`
pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `X-RateLimit-Limit`
pub static X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`
pub static X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`
pub static X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// The problem type of a 429.
pub const QUOTA_EXCEEDED_TYPE: &str =
    "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// Whole seconds, rounded up.
pub fn ceil_secs(d: Duration) -> u64 {
    d.as_micros().div_ceil(1_000_000) as u64
}

/// Milliseconds, rounded up.
pub fn ceil_millis(d: Duration) -> u64 {
    d.as_micros().div_ceil(1_000) as u64
}

/// `"per-minute";q=5;w=60, "per-hour";q=20;w=3600`, built once per loaded route and tier: the
/// names and windows of `configs`, the values in force of `set`. A limit of attempts in flight
/// has no window and shows under its algorithm's policy name: `"inflight";q=4`.
pub fn policy_header(configs: &[LimitConfig], set: &LimitSet) -> Option<HeaderValue> {
    if configs.is_empty() {
        return None;
    }
    let text = configs
        .iter()
        .zip(&set.limits)
        .map(|(c, l)| match c.algorithm.get().has_window() {
            true => format!(
                "\"{}\";q={};w={}",
                policy_name(c),
                l.limit,
                ceil_secs(c.window).max(1)
            ),
            false => format!("\"{}\";q={}", policy_name(c), l.limit),
        })
        .collect::<Vec<_>>()
        .join(", ");
    HeaderValue::from_str(&text).ok()
}

/// The name a limit goes by in `RateLimit-Policy`, `RateLimit` and the 429 body's
/// `violated-policies`: its own, or its algorithm's policy name (`inflight`).
pub fn policy_name(c: &LimitConfig) -> &str {
    c.algorithm.get().policy_name().unwrap_or(&c.name)
}

/// [`policy_name`] of limit `i` of a set.
fn set_policy_name(set: &LimitSet, i: usize) -> &str {
    let name = &set.limits[i].name;
    set.algorithm_of(i).get().policy_name().unwrap_or(name)
}

/// Adds the rate-limit headers describing `decision` to `headers`. On an allowed response they
/// describe the tightest limit; on a rejection, the rejecting limit with the longest wait.
pub fn add_headers(headers: &mut HeaderMap, tier: &Tier, decision: &Decision) {
    let (Some(i), Some(policy)) = (decision.described_limit(), &tier.policy_header) else {
        return;
    };
    let usage = &decision.limits[i];
    let (remaining, t) = if decision.allowed() {
        (usage.remaining(), ceil_secs(usage.reset))
    } else {
        let wait = if usage.exceeded() {
            usage.retry_after
        } else {
            decision.retry_after
        };
        (0, ceil_secs(wait).max(1))
    };
    let name = set_policy_name(&tier.limits, i);
    headers.insert(RATELIMIT_POLICY.clone(), policy.clone());
    if let Some(v) = ratelimit_value(name, remaining, t) {
        headers.insert(RATELIMIT.clone(), v);
    }
    headers.insert(X_RATELIMIT_LIMIT.clone(), number_value(usage.limit));
    headers.insert(X_RATELIMIT_REMAINING.clone(), number_value(remaining));
    headers.insert(X_RATELIMIT_RESET.clone(), number_value(t));
}

/// `RateLimit`'s value, `"NAME";r=REMAINING;t=SECONDS`, written in place (every allowed answer
/// carries one); `None` for a name no header value can carry.
fn ratelimit_value(name: &str, remaining: u64, t: u64) -> Option<HeaderValue> {
    let mut digits = itoa::Buffer::new();
    let mut value = Vec::with_capacity(name.len() + 48);
    value.push(b'"');
    value.extend_from_slice(name.as_bytes());
    value.extend_from_slice(b"\";r=");
    value.extend_from_slice(digits.format(remaining).as_bytes());
    value.extend_from_slice(b";t=");
    value.extend_from_slice(digits.format(t).as_bytes());
    HeaderValue::from_maybe_shared(bytes::Bytes::from(value)).ok()
}

/// The 429 for a rejected or blocked decision of `route`: `Retry-After`, the rate-limit headers
/// (unless the route turned them off: `headers = false` tells an attacker nothing of the quota)
/// and the problem body naming the limit (the block level, `"approximate": true` when the
/// in-process store's overflow sketch decided, and the segment or plan whose values applied). The body has the members of every gateway error (`crate::error::problem_body`) plus
/// the limit's; it is written directly rather than through a JSON map, because a flood of 429s
/// from the deny cache is the path an attack takes.
pub fn too_many_requests(
    route: &str,
    tier: &Tier,
    decision: &Decision,
    request_id: &RequestId,
    rate_limit_headers: bool,
) -> Response<Body> {
    let limits = &tier.limits.limits;
    let named = limits
        .get(decision.rejecting_limit().unwrap_or(0))
        .map_or("", |l| l.name.as_str());
    let mut body = String::with_capacity(320);
    body.push_str("{\"type\":\"");
    body.push_str(QUOTA_EXCEEDED_TYPE);
    body.push_str(
        "\",\"title\":\"Too Many Requests\",\"status\":429,\"error\":\"rate_limited\",\"detail\":\"route ",
    );
    push_json_chars(&mut body, route);
    body.push_str(": limit ");
    push_json_chars(&mut body, named);
    body.push_str(" exceeded\"");
    body.push_str(",\"request_id\":");
    push_json_string(&mut body, request_id.as_str());
    body.push_str(",\"route\":");
    push_json_string(&mut body, route);
    body.push_str(",\"limit\":");
    push_json_string(&mut body, named);
    body.push_str(",\"violated-policies\":[");
    let violated = decision
        .limits
        .iter()
        .enumerate()
        .filter(|(_, u)| u.exceeded());
    for (n, (i, _)) in violated.enumerate() {
        if n > 0 {
            body.push(',');
        }
        push_json_string(&mut body, set_policy_name(&tier.limits, i));
    }
    body.push_str("],\"retry_after_ms\":");
    let mut digits = itoa::Buffer::new();
    body.push_str(digits.format(ceil_millis(decision.retry_after).max(1)));
    if decision.block_level > 0 {
        body.push_str(",\"block_level\":");
        body.push_str(digits.format(decision.block_level));
    }
    if decision.approximate {
        // counted in the in-process store's overflow sketch, which can only over-count
        body.push_str(",\"approximate\":true");
    }
    if let Some(t) = &tier.name {
        body.push(',');
        push_json_string(&mut body, t.kind());
        body.push(':');
        push_json_string(&mut body, t.name());
    }
    body.push('}');
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let headers = response.headers_mut();
    // room for all eight at once (three here, five rate-limit headers): an empty map grows as
    // each is added
    headers.reserve(8);
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    headers.insert(X_REQUEST_ID.clone(), request_id.header_value().clone());
    headers.insert(
        RETRY_AFTER,
        number_value(ceil_secs(decision.retry_after).max(1)),
    );
    if rate_limit_headers {
        add_headers(headers, tier, decision);
    }
    response
}

/// Appends `text` as a JSON string: quoted, with `"`, `\\` and control characters escaped.
fn push_json_string(out: &mut String, text: &str) {
    out.push('"');
    push_json_chars(out, text);
    out.push('"');
}

/// Appends `text` as the inside of a JSON string: `"`, `\\` and control characters escaped.
fn push_json_chars(out: &mut String, text: &str) {
    if !text.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        // The usual case (names, request ids): nothing to escape, one copy.
        out.push_str(text);
        return;
    }
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::algorithm::AlgorithmId;
    use crate::store::{LimitUsage, Outcome};

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

    fn tier() -> Tier {
        let configs = vec![
            LimitConfig::new("per-minute", 5, Duration::from_secs(60)),
            LimitConfig::new("per-hour", 20, Duration::from_secs(3600)),
        ];
        let log = AlgorithmId::SLIDING_LOG;
        let set = LimitSet::simple(&[
            ("per-minute", 5, 60_000_000, log),
            ("per-hour", 20, 3_600_000_000, log),
        ]);
        Tier {
            name: None,
            policy_header: policy_header(&configs, &set),
            limits: Arc::new(set),
        }
    }

    #[test]
    fn policy_lists_every_limit() {
        assert_eq!(
            tier().policy_header.unwrap(),
            "\"per-minute\";q=5;w=60, \"per-hour\";q=20;w=3600"
        );
    }

    #[test]
    fn rejection_describes_the_rejecting_limit() {
        let d = Decision {
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
            receipt: None,
            approximate: false,
        };
        let r = too_many_requests("otp-send", &tier(), &d, &RequestId::generate(), true);
        assert_eq!(r.status(), 429);
        let h = r.headers();
        assert_eq!(h["retry-after"], "42");
        assert_eq!(h["ratelimit"], "\"per-minute\";r=0;t=42");
        assert_eq!(h["x-ratelimit-limit"], "5");
        assert_eq!(h["x-ratelimit-remaining"], "0");
        assert_eq!(h["x-ratelimit-reset"], "42");
        assert_eq!(h["content-type"], "application/problem+json");
        let quiet = too_many_requests("otp-send", &tier(), &d, &RequestId::generate(), false);
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
            receipt: None,
            approximate: false,
        };
        let mut t = tier();
        t.name = Some(crate::tier::TierName::Plan("gold \"quoted\"\n".into()));
        let id = RequestId::generate();
        let r = too_many_requests("otp-send", &t, &d, &id, true);
        let bytes =
            futures_util::FutureExt::now_or_never(http_body_util::BodyExt::collect(r.into_body()))
                .unwrap()
                .unwrap()
                .to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
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
        let r = too_many_requests("otp-send", &t, &approximate, &id, true);
        let bytes =
            futures_util::FutureExt::now_or_never(http_body_util::BodyExt::collect(r.into_body()))
                .unwrap()
                .unwrap()
                .to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(body["approximate"], true);
        assert_eq!(body["plan"], "gold \"quoted\"\n");
    }
}

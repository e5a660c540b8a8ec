//! Rate-limit headers and the 429 answer (SPEC section 5): `RateLimit-Policy` and `RateLimit`
//! in the IETF httpapi draft's structured-field syntax, the de-facto `X-RateLimit-*` trio,
//! `Retry-After`, and an RFC 9457 problem body.

use std::time::Duration;

use axum::body::Body;
use http::header::{HeaderName, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Response, StatusCode};

use super::Decision;
use crate::config::LimitConfig;

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

/// `"per-minute";q=5;w=60, "per-hour";q=20;w=3600`, built once per loaded route.
pub fn policy_header(limits: &[LimitConfig]) -> Option<HeaderValue> {
    if limits.is_empty() {
        return None;
    }
    let text = limits
        .iter()
        .map(|l| {
            format!(
                "\"{}\";q={};w={}",
                l.name,
                l.limit,
                ceil_secs(l.window).max(1)
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    HeaderValue::from_str(&text).ok()
}

/// Adds the rate-limit headers describing `decision` to `headers`. On an allowed response they
/// describe the tightest limit; on a rejection, the rejecting limit with the longest wait.
pub fn add_headers(
    headers: &mut HeaderMap,
    policy: &HeaderValue,
    limits: &[LimitConfig],
    decision: &Decision,
) {
    let rejected = !decision.allowed();
    let chosen = if rejected {
        decision
            .rejecting_limit()
            .or_else(|| decision.tightest_limit())
    } else {
        decision.tightest_limit()
    };
    let Some(i) = chosen else { return };
    let usage = &decision.limits[i];
    let (remaining, t) = if rejected {
        let wait = if usage.exceeded() {
            usage.retry_after
        } else {
            decision.retry_after
        };
        (0, ceil_secs(wait).max(1))
    } else {
        (usage.remaining(), ceil_secs(usage.reset))
    };
    headers.insert(RATELIMIT_POLICY.clone(), policy.clone());
    if let Ok(v) = HeaderValue::from_str(&format!("\"{}\";r={};t={}", limits[i].name, remaining, t))
    {
        headers.insert(RATELIMIT.clone(), v);
    }
    headers.insert(X_RATELIMIT_LIMIT.clone(), HeaderValue::from(usage.limit));
    headers.insert(X_RATELIMIT_REMAINING.clone(), HeaderValue::from(remaining));
    headers.insert(X_RATELIMIT_RESET.clone(), HeaderValue::from(t));
}

/// The 429 for a rejected or blocked decision.
pub fn too_many_requests(
    route: &str,
    policy: &HeaderValue,
    limits: &[LimitConfig],
    decision: &Decision,
) -> Response<Body> {
    let named = decision.rejecting_limit().unwrap_or(0);
    let violated: Vec<&str> = decision
        .limits
        .iter()
        .zip(limits)
        .filter(|(u, _)| u.exceeded())
        .map(|(_, l)| l.name.as_str())
        .collect();
    let body = serde_json::json!({
        "type": QUOTA_EXCEEDED_TYPE,
        "title": "Too Many Requests",
        "status": 429,
        "error": "rate_limited",
        "route": route,
        "limit": limits.get(named).map(|l| l.name.as_str()),
        "violated-policies": violated,
        "retry_after_ms": ceil_millis(decision.retry_after).max(1),
    });
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    headers.insert(
        RETRY_AFTER,
        HeaderValue::from(ceil_secs(decision.retry_after).max(1)),
    );
    add_headers(headers, policy, limits, decision);
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::{LimitUsage, Outcome};

    fn limits() -> Vec<LimitConfig> {
        vec![
            LimitConfig {
                name: "per-minute".into(),
                limit: 5,
                window: Duration::from_secs(60),
            },
            LimitConfig {
                name: "per-hour".into(),
                limit: 20,
                window: Duration::from_secs(3600),
            },
        ]
    }

    #[test]
    fn policy_lists_every_limit() {
        let v = policy_header(&limits()).unwrap();
        assert_eq!(v, "\"per-minute\";q=5;w=60, \"per-hour\";q=20;w=3600");
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
                },
                LimitUsage {
                    used: 7,
                    limit: 20,
                    reset: Duration::from_secs(3000),
                    retry_after: Duration::ZERO,
                },
            ],
        };
        let r = too_many_requests(
            "otp-send",
            &policy_header(&limits()).unwrap(),
            &limits(),
            &d,
        );
        assert_eq!(r.status(), 429);
        let h = r.headers();
        assert_eq!(h["retry-after"], "42");
        assert_eq!(h["ratelimit"], "\"per-minute\";r=0;t=42");
        assert_eq!(h["x-ratelimit-limit"], "5");
        assert_eq!(h["x-ratelimit-remaining"], "0");
        assert_eq!(h["x-ratelimit-reset"], "42");
    }
}

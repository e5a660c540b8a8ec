//! Rate-limit headers and the 429 answer (SPEC section 5): `RateLimit-Policy` and `RateLimit`
//! in the IETF httpapi draft's structured-field syntax, the de-facto `X-RateLimit-*` trio,
//! `Retry-After`, and an RFC 9457 problem body with the members of every gateway error
//! (`crate::error`) plus the limit's.

use std::time::Duration;

use axum::body::Body;
use http::header::{HeaderName, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Response, StatusCode};

use super::Tier;
use crate::config::LimitConfig;
use crate::error::{problem_body, problem_response};
use crate::request_id::RequestId;
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
/// names and windows of `configs`, the values in force of `set`.
pub fn policy_header(configs: &[LimitConfig], set: &LimitSet) -> Option<HeaderValue> {
    if configs.is_empty() {
        return None;
    }
    let text = configs
        .iter()
        .zip(&set.limits)
        .map(|(c, l)| {
            format!(
                "\"{}\";q={};w={}",
                c.name,
                l.limit,
                ceil_secs(c.window).max(1)
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    HeaderValue::from_str(&text).ok()
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
    let name = &tier.limits.limits[i].name;
    headers.insert(RATELIMIT_POLICY.clone(), policy.clone());
    if let Ok(v) = HeaderValue::from_str(&format!("\"{name}\";r={remaining};t={t}")) {
        headers.insert(RATELIMIT.clone(), v);
    }
    headers.insert(X_RATELIMIT_LIMIT.clone(), HeaderValue::from(usage.limit));
    headers.insert(X_RATELIMIT_REMAINING.clone(), HeaderValue::from(remaining));
    headers.insert(X_RATELIMIT_RESET.clone(), HeaderValue::from(t));
}

/// The 429 for a rejected or blocked decision of `route`: `Retry-After`, the rate-limit headers
/// and the problem body naming the limit (and the segment or plan whose values applied).
pub fn too_many_requests(
    route: &str,
    tier: &Tier,
    decision: &Decision,
    request_id: &RequestId,
) -> Response<Body> {
    let limits = &tier.limits.limits;
    let named = decision.rejecting_limit().unwrap_or(0);
    let violated: Vec<&str> = decision
        .limits
        .iter()
        .zip(limits)
        .filter(|(u, _)| u.exceeded())
        .map(|(_, l)| l.name.as_str())
        .collect();
    let status = StatusCode::TOO_MANY_REQUESTS;
    let mut body = problem_body(status, "rate_limited", "", request_id);
    body.insert("type".into(), QUOTA_EXCEEDED_TYPE.into());
    body.insert("title".into(), "Too Many Requests".into());
    body.insert(
        "detail".into(),
        format!(
            "route {route}: limit {} exceeded",
            limits.get(named).map_or("", |l| l.name.as_str())
        )
        .into(),
    );
    body.insert("route".into(), route.into());
    body.insert(
        "limit".into(),
        limits.get(named).map(|l| l.name.as_str()).into(),
    );
    body.insert("violated-policies".into(), violated.into());
    body.insert(
        "retry_after_ms".into(),
        ceil_millis(decision.retry_after).max(1).into(),
    );
    if let Some(t) = &tier.name {
        body.insert(t.kind().into(), t.name().into());
    }
    let mut response = problem_response(status, body, request_id);
    let headers = response.headers_mut();
    headers.insert(
        RETRY_AFTER,
        HeaderValue::from(ceil_secs(decision.retry_after).max(1)),
    );
    add_headers(headers, tier, decision);
    response
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::Algorithm;
    use crate::store::{Limit, LimitUsage, Outcome};

    fn tier() -> Tier {
        let configs = vec![
            LimitConfig::new("per-minute", 5, Duration::from_secs(60)),
            LimitConfig::new("per-hour", 20, Duration::from_secs(3600)),
        ];
        let set = LimitSet {
            algorithm: Algorithm::SlidingLog,
            block_ms: 0,
            limits: configs
                .iter()
                .map(|c| Limit {
                    name: c.name.clone(),
                    limit: c.limit,
                    window_us: c.window.as_micros() as u64,
                })
                .collect(),
        };
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
                },
                LimitUsage {
                    used: 7,
                    limit: 20,
                    reset: Duration::from_secs(3000),
                    retry_after: Duration::ZERO,
                },
            ],
            decided_at_us: 0,
        };
        let r = too_many_requests("otp-send", &tier(), &d, &RequestId::generate());
        assert_eq!(r.status(), 429);
        let h = r.headers();
        assert_eq!(h["retry-after"], "42");
        assert_eq!(h["ratelimit"], "\"per-minute\";r=0;t=42");
        assert_eq!(h["x-ratelimit-limit"], "5");
        assert_eq!(h["x-ratelimit-remaining"], "0");
        assert_eq!(h["x-ratelimit-reset"], "42");
        assert_eq!(h["content-type"], "application/problem+json");
    }
}

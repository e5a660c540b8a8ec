//! The `RateLimitResponse`: `overall_code`, one status per request descriptor in order (the
//! limit that applied with its `requests_per_unit`, the units left and the time until the next
//! comes back, or until the request would fit when over it), and, with `[rls] headers = true`,
//! the rate-limit headers of a traffic-path answer for Envoy to add to its response, named as
//! the specifications write them (`RateLimit-Policy`, `Retry-After`).
//!
//! A descriptor no limit applies to (nothing matched, a replaced limit, an unknown domain) is
//! OK with no `current_limit`; an `unlimited` one is OK with `limit_remaining` 2^32-1, as
//! envoyproxy/ratelimit answers. A shadow-mode limit's status is OK whatever it counts; a
//! quota-mode limit's is OVER_LIMIT when it is over, though the request may be OK. A
//! descriptor refused before any decision (a cost above its limit, too many descriptors
//! matching a limit) is OVER_LIMIT with its limit, nothing remaining and its window until
//! reset, and so is one whose cost is above a quota-mode limit (the request may be OK); one whose Envoy override cannot be counted has no limit to show; one whose cost is
//! above a shadow-mode limit is OK with that limit and nothing remaining. An OVER_LIMIT answer
//! with the headers always carries `Retry-After`: the refusing set's, else the longest wait its
//! statuses give. A request refused only before any decision shows, in its headers, the limit
//! of the longest window that refused it, with nothing remaining.

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use http::HeaderMap;

use super::decide::{Decided, Outcome};
use super::request::{Plan, Status};
use super::unit::code_of_window;
use crate::config::LimitConfig;
use crate::header_case;
use crate::limit::headers::{
    add_headers, add_unseen_refusal_headers, ceil_secs, unseen_policy_entry,
};
use crate::limit::STORE_UNAVAILABLE_RETRY_SECS;

/// The answer for a request of an unknown domain: every descriptor OK, nothing applied.
pub fn unknown_domain(descriptors: usize) -> RateLimitResponse {
    RateLimitResponse {
        overall_code: Code::Ok as i32,
        statuses: vec![free(); descriptors],
        ..RateLimitResponse::default()
    }
}

/// The answer for `plan`, decided as `outcome`; `headers` adds the rate-limit headers.
pub fn response(plan: &Plan, outcome: &Outcome, headers: bool) -> RateLimitResponse {
    let statuses: Vec<DescriptorStatus> = plan
        .statuses
        .iter()
        .map(|s| match s {
            Status::Free => free(),
            Status::Unlimited => DescriptorStatus {
                code: Code::Ok as i32,
                limit_remaining: u32::MAX,
                ..DescriptorStatus::default()
            },
            Status::ShadowOver(limit) => DescriptorStatus {
                code: Code::Ok as i32,
                current_limit: Some(rate_limit(limit)),
                duration_until_reset: Some(proto_duration(limit.window)),
                ..DescriptorStatus::default()
            },
            Status::QuotaOver(limit) => over_before_decision(Some(limit)),
            Status::Refused(limit) => over_before_decision(limit.as_deref()),
            &Status::Counted { group, index } => {
                let set = match group {
                    Some(g) => outcome.charged.get(g),
                    None => outcome.read.as_ref(),
                };
                status(set.expect("a counted descriptor's set"), index)
            }
        })
        .collect();
    let read_over = outcome.read.as_ref().is_some_and(|r| {
        (r.verdict.decision.as_ref()).is_some_and(|d| {
            (d.limits.iter().enumerate()).any(|(i, u)| u.exceeded() && r.combo.enforces(i))
        })
    });
    let refused = outcome.refused || read_over;
    let refused_unseen = (refused && !read_over)
        .then(|| longest_window(plan, refused_with))
        .flatten()
        .filter(|_| outcome.charged.iter().all(|d| d.verdict.forwards()));
    let mut response_headers_to_add = match (refused_unseen, outcome.shown(), headers) {
        (_, _, false) => Vec::new(),
        (Some(limit), _, true) => unseen_refusal_headers(limit),
        (None, Some(shown), true) => rate_limit_headers(shown, plan, outcome),
        (None, None, true) => shadow_over_headers(plan),
    };
    if headers
        && refused
        && !response_headers_to_add
            .iter()
            .any(|h| h.key.eq_ignore_ascii_case("retry-after"))
    {
        response_headers_to_add.push(retry_after_of(&statuses));
    }
    RateLimitResponse {
        overall_code: if refused { Code::OverLimit } else { Code::Ok } as i32,
        statuses,
        response_headers_to_add,
        ..RateLimitResponse::default()
    }
}

fn free() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        ..DescriptorStatus::default()
    }
}

/// The status of a descriptor found over before any decision (its cost above `limit`, or no
/// limit it could be counted by): OVER_LIMIT, nothing remaining, its window until reset.
fn over_before_decision(limit: Option<&LimitConfig>) -> DescriptorStatus {
    DescriptorStatus {
        code: Code::OverLimit as i32,
        current_limit: limit.map(rate_limit),
        duration_until_reset: limit.map(|l| proto_duration(l.window)),
        ..DescriptorStatus::default()
    }
}

/// A limit as a status shows it.
fn rate_limit(config: &LimitConfig) -> RateLimit {
    RateLimit {
        name: config.name.clone(),
        requests_per_unit: u32::try_from(config.limit).unwrap_or(u32::MAX),
        unit: code_of_window(config.window),
    }
}

/// `Retry-After` of a refused request no refusing set's headers carry (a descriptor refused
/// before any decision, a read-only limit over): the longest wait of its OVER_LIMIT statuses,
/// in whole seconds, at least 1.
fn retry_after_of(statuses: &[DescriptorStatus]) -> HeaderValue {
    let longest = (statuses.iter())
        .filter(|s| s.code == Code::OverLimit as i32)
        .filter_map(|s| s.duration_until_reset.as_ref())
        .map(|d| Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32))
        .max()
        .unwrap_or(Duration::from_secs(STORE_UNAVAILABLE_RETRY_SECS));
    HeaderValue {
        key: header_case::written(http::header::RETRY_AFTER.as_str()),
        value: ceil_secs(longest).max(1).to_string(),
        ..HeaderValue::default()
    }
}

/// Of the limits `pick` finds in the statuses, the one with the longest window (of refusals,
/// the one a client waits longest for; the first of them on a tie).
fn longest_window<'a>(
    plan: &'a Plan,
    pick: impl Fn(&'a Status) -> Option<&'a LimitConfig>,
) -> Option<&'a LimitConfig> {
    (plan.statuses.iter())
        .filter_map(pick)
        .reduce(|a, b| if b.window > a.window { b } else { a })
}

/// The limit of a descriptor refused before any decision, if it has one to show.
fn refused_with(status: &Status) -> Option<&LimitConfig> {
    match status {
        Status::Refused(limit) => limit.as_deref(),
        _ => None,
    }
}

/// The limit of a descriptor whose cost is above a shadow-mode limit.
fn shadow_over_with(status: &Status) -> Option<&LimitConfig> {
    match status {
        Status::ShadowOver(limit) => Some(limit),
        _ => None,
    }
}

/// The limit of a descriptor whose cost is above a quota-mode limit (the request not refused
/// for it alone).
fn quota_over_with(status: &Status) -> Option<&LimitConfig> {
    match status {
        Status::QuotaOver(limit) => Some(limit),
        _ => None,
    }
}

/// The headers of a request whose only limits are shadow-mode ones its costs are above: the
/// longest of them, nothing remaining, as a shadow route over its limit answers (no
/// `Retry-After`: nothing is refused).
fn shadow_over_headers(plan: &Plan) -> Vec<HeaderValue> {
    let Some(limit) = longest_window(plan, shadow_over_with) else {
        return Vec::new();
    };
    let mut headers = unseen_refusal_headers(limit);
    headers.retain(|h| !h.key.eq_ignore_ascii_case("retry-after"));
    headers
}

/// The headers of a request refused before any decision by `limit` (a cost above it).
fn unseen_refusal_headers(limit: &LimitConfig) -> Vec<HeaderValue> {
    let mut headers = HeaderMap::new();
    add_unseen_refusal_headers(&mut headers, limit);
    proto_headers(&headers)
}

/// The status of limit `index` of a decided set.
fn status(set: &Decided, index: usize) -> DescriptorStatus {
    let config = &set.combo.all.config.limits[index];
    // A quota-mode limit over says so, whatever the request's answer.
    let enforced = !set.combo.shadow[index];
    let current_limit = Some(rate_limit(config));
    let Some(decision) = &set.verdict.decision else {
        // The store could not say: the route's on_error decided, usage is unknown.
        let over = enforced && !set.verdict.forwards();
        return DescriptorStatus {
            code: if over { Code::OverLimit } else { Code::Ok } as i32,
            current_limit,
            duration_until_reset: over
                .then(|| proto_duration(Duration::from_secs(STORE_UNAVAILABLE_RETRY_SECS))),
            ..DescriptorStatus::default()
        };
    };
    let usage = &decision.limits[index];
    let over = usage.exceeded();
    DescriptorStatus {
        code: if over && enforced {
            Code::OverLimit
        } else {
            Code::Ok
        } as i32,
        current_limit,
        limit_remaining: if over {
            0
        } else {
            let taken_back = if set.charged[index] {
                set.taken_back
            } else {
                0
            };
            let remaining = (usage.remaining() + taken_back).min(usage.limit);
            u32::try_from(remaining).unwrap_or(u32::MAX)
        },
        duration_until_reset: Some(proto_duration(if over {
            usage.retry_after
        } else {
            usage.reset
        })),
        ..DescriptorStatus::default()
    }
}

/// `RateLimit`, `X-RateLimit-*` of the set shown, `RateLimit-Policy` of every set decided, and
/// `Retry-After` when refused: the headers a route's answer carries.
fn rate_limit_headers(set: &Decided, plan: &Plan, outcome: &Outcome) -> Vec<HeaderValue> {
    let mut headers = HeaderMap::new();
    let verdict = &set.verdict;
    if let Some(d) = &verdict.decision {
        add_headers(&mut headers, set.combo.all.default_tier(), d);
    }
    if !verdict.forwards() {
        let wait = verdict.retry_after();
        headers.insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from(ceil_secs(wait).max(1)),
        );
    }
    let mut headers = proto_headers(&headers);
    if let Some(policy) = headers
        .iter_mut()
        .find(|h| h.key.eq_ignore_ascii_case("ratelimit-policy"))
    {
        policy.value = every_policy(plan, outcome);
    }
    headers
}

/// `RateLimit-Policy` of every set the request was decided in, each limit once, in the sets'
/// order, then of the limits found over before any decision without refusing (shadow-mode or
/// quota-mode ones a cost is above): as a route's answer lists every limit it is under, however
/// the costs split them.
fn every_policy(plan: &Plan, outcome: &Outcome) -> String {
    let mut entries: Vec<String> = Vec::new();
    let mut add = |entry: String| {
        if !entries.contains(&entry) {
            entries.push(entry);
        }
    };
    for set in outcome.charged.iter().chain(&outcome.read) {
        let policy = set.combo.all.default_tier().policy_header.as_ref();
        let Some(text) = policy.and_then(|p| p.to_str().ok()) else {
            continue;
        };
        text.split(", ").for_each(|entry| add(entry.to_string()));
    }
    (plan.statuses.iter())
        .filter_map(|s| shadow_over_with(s).or(quota_over_with(s)))
        .for_each(|limit| add(unseen_policy_entry(limit)));
    entries.join(", ")
}

/// `headers` as Envoy's header values, named as the specifications write them.
fn proto_headers(headers: &HeaderMap) -> Vec<HeaderValue> {
    headers
        .iter()
        .map(|(k, v)| HeaderValue {
            key: header_case::written(k.as_str()),
            value: String::from_utf8_lossy(v.as_bytes()).into_owned(),
            ..HeaderValue::default()
        })
        .collect()
}

fn proto_duration(d: Duration) -> ProtoDuration {
    ProtoDuration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

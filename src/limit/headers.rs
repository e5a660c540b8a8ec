//! Rate-limit headers on an answer (README, "The traffic path"): `RateLimit-Policy` and
//! `RateLimit` in the IETF httpapi draft's structured-field syntax and the de-facto
//! `X-RateLimit-*` trio, describing the limit a decision names. A 429's own headers and body
//! are `super::refusal`'s.

use http::{HeaderMap, HeaderValue};

use super::header_number::number_value;
pub use super::header_values::{
    ceil_millis, ceil_secs, policy_name, set_policy_name, RATELIMIT, RATELIMIT_POLICY,
    X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET,
};
use super::header_values::{ratelimit_value, Described};
use super::tier::Tier;
use crate::config::LimitConfig;
use crate::store::{Decision, LimitSet};

/// `"per-minute";q=5;w=60, "per-hour";q=20;w=3600`, built once per loaded route and tier: the
/// names and windows of `configs`, the values in force of `set`. A limit of attempts in flight
/// has no window and shows under its algorithm's policy name, `"inflight";q=4`, unless another
/// limit of the route goes by that name.
pub fn policy_header(configs: &[LimitConfig], set: &LimitSet) -> Option<HeaderValue> {
    if configs.is_empty() {
        return None;
    }
    let text = configs
        .iter()
        .zip(&set.limits)
        .enumerate()
        .map(|(i, (_, l))| policy_entry(configs, i, l.limit))
        .collect::<Vec<_>>()
        .join(", ");
    HeaderValue::from_str(&text).ok()
}

/// Limit `i`'s entry of `RateLimit-Policy`, with `limit` its value in force.
fn policy_entry(configs: &[LimitConfig], i: usize, limit: u64) -> String {
    let (c, name) = (&configs[i], policy_name(configs, i));
    match c.algorithm.get().has_window() {
        true => format!("\"{name}\";q={limit};w={}", ceil_secs(c.window).max(1)),
        false => format!("\"{name}\";q={limit}"),
    }
}

/// The `RateLimit-Policy` entry of `config` shown alone (found over before any decision).
pub fn unseen_policy_entry(config: &LimitConfig) -> String {
    policy_entry(std::slice::from_ref(config), 0, config.limit)
}

/// Adds the rate-limit headers of a refusal by `config` alone made before any decision (a cost
/// above the limit): its policy, nothing remaining, and its window to wait.
pub fn add_unseen_refusal_headers(headers: &mut HeaderMap, config: &LimitConfig) {
    let wait = ceil_secs(config.window).max(1);
    let alone = std::slice::from_ref(config);
    if let Ok(policy) = HeaderValue::from_str(&unseen_policy_entry(config)) {
        headers.insert(RATELIMIT_POLICY.clone(), policy);
    }
    if let Some(v) = ratelimit_value(policy_name(alone, 0), 0, wait) {
        headers.insert(RATELIMIT.clone(), v);
    }
    headers.insert(X_RATELIMIT_LIMIT.clone(), number_value(config.limit));
    headers.insert(X_RATELIMIT_REMAINING.clone(), number_value(0));
    headers.insert(X_RATELIMIT_RESET.clone(), number_value(wait));
    headers.insert(http::header::RETRY_AFTER, number_value(wait));
}

/// Adds the rate-limit headers describing `decision` to `headers`. On an allowed response they
/// describe the tightest limit; on a rejection, the rejecting limit with the longest wait.
pub fn add_headers(headers: &mut HeaderMap, tier: &Tier, decision: &Decision) {
    let (Some(shown), Some(policy)) = (Described::of(decision), &tier.policy_header) else {
        return;
    };
    let name = tier.refusal.policy_name(shown.limit_index);
    headers.insert(RATELIMIT_POLICY.clone(), policy.clone());
    if let Some(v) = ratelimit_value(name, shown.remaining, shown.seconds) {
        headers.insert(RATELIMIT.clone(), v);
    }
    headers.insert(X_RATELIMIT_LIMIT.clone(), number_value(shown.limit));
    headers.insert(X_RATELIMIT_REMAINING.clone(), number_value(shown.remaining));
    headers.insert(X_RATELIMIT_RESET.clone(), number_value(shown.seconds));
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::algorithm::AlgorithmId;

    #[test]
    fn policy_lists_every_limit() {
        let configs = vec![
            LimitConfig::new("per-minute", 5, Duration::from_secs(60)),
            LimitConfig::new("per-hour", 20, Duration::from_secs(3600)),
        ];
        let log = AlgorithmId::SLIDING_LOG;
        let set = LimitSet::simple(&[
            ("per-minute", 5, 60_000_000, log),
            ("per-hour", 20, 3_600_000_000, log),
        ]);
        assert_eq!(
            policy_header(&configs, &set).unwrap(),
            "\"per-minute\";q=5;w=60, \"per-hour\";q=20;w=3600"
        );
    }
}

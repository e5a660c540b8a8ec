//! The rate-limit headers' names and the values they carry: `RateLimit-Policy` and `RateLimit`
//! in the IETF httpapi draft's structured-field syntax, the de-facto `X-RateLimit-*` trio, and
//! the whole seconds and milliseconds a wait is shown in.

use std::time::Duration;

use http::header::HeaderName;
use http::HeaderValue;

use crate::config::LimitConfig;
use crate::store::{Decision, LimitSet, Outcome};

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

/// Whole seconds, rounded up.
pub fn ceil_secs(d: Duration) -> u64 {
    d.as_micros().div_ceil(1_000_000) as u64
}

/// Milliseconds, rounded up.
pub fn ceil_millis(d: Duration) -> u64 {
    d.as_micros().div_ceil(1_000) as u64
}

/// `RateLimit`'s value, `"NAME";r=REMAINING;t=SECONDS`, written in place (every allowed answer
/// carries one); `None` for a name no header value can carry.
pub fn ratelimit_value(name: &str, remaining: u64, t: u64) -> Option<HeaderValue> {
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

/// The name limit `i` of `configs` goes by in `RateLimit-Policy`, `RateLimit` and the 429
/// body's `violated-policies` ([`shown_name`]).
pub fn policy_name(configs: &[LimitConfig], i: usize) -> &str {
    shown_name(
        configs.len(),
        i,
        |j| &configs[j].name,
        |j| configs[j].algorithm.get().policy_name(),
    )
}

/// [`policy_name`] of limit `i` of a set.
pub fn set_policy_name(set: &LimitSet, i: usize) -> &str {
    shown_name(
        set.limits.len(),
        i,
        |j| &set.limits[j].name,
        |j| set.algorithm_of(j).get().policy_name(),
    )
}

/// The name limit `i` of `n` goes by: its algorithm's policy name (`inflight`) when no other
/// limit of the set goes by that name, else its own, so that two concurrency limits of a route,
/// or one beside a limit named `inflight`, stay apart in the headers.
fn shown_name<'a>(
    n: usize,
    i: usize,
    own: impl Fn(usize) -> &'a str,
    algorithm_name: impl Fn(usize) -> Option<&'static str>,
) -> &'a str {
    let Some(generic) = algorithm_name(i) else {
        return own(i);
    };
    let taken = (0..n)
        .filter(|&j| j != i)
        .any(|j| algorithm_name(j).unwrap_or(own(j)) == generic);
    if taken {
        own(i)
    } else {
        generic
    }
}

/// What the rate-limit headers say of a decision: on an allowed answer the tightest limit, what
/// remains of it and the seconds until its window resets; on a rejection the rejecting limit
/// with the longest wait, nothing remaining, and the seconds to wait (at least 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Described {
    /// The limit's index in the decision (and in its limit set).
    pub limit_index: usize,
    /// The limit's value in force.
    pub limit: u64,
    /// What remains of it.
    pub remaining: u64,
    /// Whole seconds until the window resets, or until the client may try again.
    pub seconds: u64,
}

impl Described {
    /// What the headers say of `decision`, if it names a limit.
    pub fn of(decision: &Decision) -> Option<Described> {
        let limit_index = decision.described_limit()?;
        let usage = &decision.limits[limit_index];
        let (remaining, seconds) = if decision.allowed() {
            (usage.remaining(), ceil_secs(usage.reset))
        } else {
            let wait = if usage.exceeded() {
                usage.retry_after
            } else {
                decision.retry_after
            };
            // the quota left: what a request of a smaller cost could still take, none in a block
            let remaining = match decision.outcome {
                Outcome::Blocked => 0,
                _ => usage.remaining(),
            };
            (remaining, ceil_secs(wait).max(1))
        };
        Some(Described {
            limit_index,
            limit: usage.limit,
            remaining,
            seconds,
        })
    }
}

//! The 429 a tier answers: `Retry-After`, the rate-limit headers (unless the route turned them
//! off) and an RFC 9457 problem body naming the limit. What no decision changes (the body's
//! text around the request id, the limits' names as JSON, the tier's member, the header map's
//! names and fixed values) is written once, when the tier is built: a flood of refusals from the
//! deny cache is the path an attack takes, so each one costs only what its decision changes.

use axum::body::Body;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

use super::header_number::number_value;
use super::header_values::{
    ceil_millis, ceil_secs, ratelimit_value, set_policy_name, Described, RATELIMIT,
    RATELIMIT_POLICY, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET,
};
use crate::request_id::{RequestId, X_REQUEST_ID};
use crate::store::{Decision, LimitSet};
use crate::tier::TierName;

/// The problem type of a 429.
pub const QUOTA_EXCEEDED_TYPE: &str =
    "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// The parts of a tier's 429 that no decision changes.
#[derive(Debug)]
pub struct Refusal {
    /// Per limit, and one more for a decision that names none: the body around the request id.
    heads: Box<[BodyHead]>,
    /// Each limit's policy name, for `RateLimit`.
    names: Box<[Box<str>]>,
    /// The same as JSON strings, for `violated-policies`.
    policies: Box<[Box<str>]>,
    /// Whether the route blocks: its 429 bodies always carry `block_level` (0 for a refusal
    /// that started no block).
    blocks: bool,
    /// The body's end: the tier's member (`,"plan":"gold"`) and the closing brace.
    tail: Box<str>,
    /// The headers of a 429 with the rate-limit ones (`None` when the tier has no limits), the
    /// values a decision sets left empty.
    described: Option<HeaderMap>,
    /// The headers of a 429 without them: `Content-Type`, `X-Request-Id` and `Retry-After`.
    quiet: HeaderMap,
}

/// The body of a 429 up to `violated-policies`, without the request id: `text[..split]` comes
/// before it, `text[split..]` after.
#[derive(Debug)]
struct BodyHead {
    text: Box<str>,
    split: usize,
}

impl Refusal {
    /// The 429 parts of a tier of route `route`: its limits `limits`, its name `tier` (`None`
    /// for the route's own values) and its `RateLimit-Policy`.
    pub fn new(
        route: &str,
        limits: &LimitSet,
        tier: Option<&TierName>,
        policy: Option<&HeaderValue>,
    ) -> Refusal {
        let names: Box<[Box<str>]> = (0..limits.limits.len())
            .map(|i| set_policy_name(limits, i).into())
            .collect();
        let heads = limits.limits.iter().map(|l| l.name.as_str());
        let heads = heads.chain([""]).map(|limit| BodyHead::new(route, limit));
        let mut tail = String::new();
        if let Some(t) = tier {
            tail.push(',');
            push_json_string(&mut tail, t.kind());
            tail.push(':');
            push_json_string(&mut tail, t.name());
        }
        tail.push('}');
        Refusal {
            heads: heads.collect(),
            policies: names.iter().map(|n| json_string(n).into()).collect(),
            names,
            blocks: limits.block.is_some(),
            tail: tail.into(),
            described: policy.map(|p| header_template(Some(p))),
            quiet: header_template(None),
        }
    }

    /// The 429 for a rejected or blocked decision: `Retry-After`, the rate-limit headers
    /// (unless the route turned them off: `headers = false` tells an attacker nothing of the
    /// quota) and the problem body naming the limit (the block level on a blocking route,
    /// `"approximate": true`
    /// when the in-process store's overflow sketch decided, and the segment or plan whose
    /// values applied). The body has the members of every gateway error
    /// (`crate::error::problem_body`) plus the limit's.
    pub fn answer(
        &self,
        decision: &Decision,
        request_id: &RequestId,
        rate_limit_headers: bool,
    ) -> Response<Body> {
        let mut response = Response::new(Body::from(self.body(decision, request_id)));
        *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        *response.headers_mut() = self.headers(decision, request_id, rate_limit_headers);
        response
    }

    /// The name limit `i` goes by in the rate-limit headers (`super::header_values::
    /// set_policy_name`, worked out when the tier was built); `""` out of range.
    pub fn policy_name(&self, i: usize) -> &str {
        self.names.get(i).map_or("", |n| n)
    }

    /// The body's text for rejecting limit `i` (out of range: a decision that names none).
    fn head(&self, i: Option<usize>) -> &BodyHead {
        let last = self.heads.len() - 1;
        &self.heads[i.unwrap_or(0).min(last)]
    }

    /// The problem body.
    fn body(&self, decision: &Decision, request_id: &RequestId) -> String {
        let head = self.head(decision.rejecting_limit());
        let mut body = String::with_capacity(head.text.len() + self.tail.len() + 160);
        body.push_str(&head.text[..head.split]);
        push_json_string(&mut body, request_id.as_str());
        body.push_str(&head.text[head.split..]);
        for (n, i) in decision.violated_limits().enumerate() {
            if n > 0 {
                body.push(',');
            }
            match self.policies.get(i) {
                Some(name) => body.push_str(name),
                None => body.push_str("\"\""),
            }
        }
        body.push_str("],\"retry_after_ms\":");
        let mut digits = itoa::Buffer::new();
        body.push_str(digits.format(ceil_millis(decision.retry_after).max(1)));
        if self.blocks || decision.block_level > 0 {
            body.push_str(",\"block_level\":");
            body.push_str(digits.format(decision.block_level));
        }
        if decision.approximate {
            // counted in the in-process store's overflow sketch, which can only over-count
            body.push_str(",\"approximate\":true");
        }
        body.push_str(&self.tail);
        body
    }

    /// The headers: the template with what the decision says in place of its empty values.
    fn headers(
        &self,
        decision: &Decision,
        request_id: &RequestId,
        rate_limit_headers: bool,
    ) -> HeaderMap {
        let id = Some(request_id.header_value().clone());
        let retry_after = Some(number_value(ceil_secs(decision.retry_after).max(1)));
        let shown = Described::of(decision).filter(|_| rate_limit_headers);
        let (Some(shown), Some(template)) = (shown, &self.described) else {
            return filled(&self.quiet, [None, id, retry_after]);
        };
        let name = self.policy_name(shown.limit_index);
        let ratelimit = ratelimit_value(name, shown.remaining, shown.seconds);
        let unsendable = ratelimit.is_none();
        let mut headers = filled(
            template,
            [
                None,
                id,
                retry_after,
                None,
                ratelimit,
                Some(number_value(shown.limit)),
                Some(number_value(shown.remaining)),
                Some(number_value(shown.seconds)),
            ],
        );
        if unsendable {
            headers.remove(&RATELIMIT);
        }
        headers
    }
}

impl BodyHead {
    fn new(route: &str, limit: &str) -> BodyHead {
        let mut text = String::with_capacity(200 + 2 * (route.len() + limit.len()));
        text.push_str("{\"type\":\"");
        text.push_str(QUOTA_EXCEEDED_TYPE);
        text.push_str(
            "\",\"title\":\"Too Many Requests\",\"status\":429,\"error\":\"rate_limited\",\"detail\":\"route ",
        );
        push_json_chars(&mut text, route);
        text.push_str(": limit ");
        push_json_chars(&mut text, limit);
        text.push_str(" exceeded\",\"request_id\":");
        let split = text.len();
        text.push_str(",\"route\":");
        push_json_string(&mut text, route);
        text.push_str(",\"limit\":");
        push_json_string(&mut text, limit);
        text.push_str(",\"violated-policies\":[");
        BodyHead {
            text: text.into(),
            split,
        }
    }
}

/// The headers of a 429, in the order it sends them: the first [`QUIET`] on every one, the rest
/// when it carries the rate-limit headers.
static ORDER: [&HeaderName; 8] = [
    &CONTENT_TYPE,
    &X_REQUEST_ID,
    &RETRY_AFTER,
    &RATELIMIT_POLICY,
    &RATELIMIT,
    &X_RATELIMIT_LIMIT,
    &X_RATELIMIT_REMAINING,
    &X_RATELIMIT_RESET,
];

/// How many of [`ORDER`] a 429 without the rate-limit headers carries.
const QUIET: usize = 3;

/// A 429's header map, [`ORDER`]'s names with the rate-limit ones when the tier's
/// `RateLimit-Policy` is given: the media type and the policy hold their values, the others are
/// empty until a decision fills them in.
fn header_template(policy: Option<&HeaderValue>) -> HeaderMap {
    let names = &ORDER[..policy.map_or(QUIET, |_| ORDER.len())];
    let mut headers = HeaderMap::with_capacity(names.len());
    for &name in names {
        headers.insert(name.clone(), HeaderValue::from_static(""));
    }
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    if let Some(policy) = policy {
        headers.insert(RATELIMIT_POLICY.clone(), policy.clone());
    }
    headers
}

/// A copy of `template` with `values[i]` as the value of its `i`th header (`None`: the
/// template's own). A map built by inserting distinct names, none removed, yields them in the
/// order they were inserted, [`ORDER`]'s: its headers are filled in place, without looking a
/// name up again.
fn filled<const N: usize>(template: &HeaderMap, values: [Option<HeaderValue>; N]) -> HeaderMap {
    let mut headers = template.clone();
    debug_assert_eq!(headers.len(), N);
    for (i, ((name, slot), value)) in headers.iter_mut().zip(values).enumerate() {
        debug_assert_eq!(name, ORDER[i], "the template's order");
        if let Some(value) = value {
            *slot = value;
        }
    }
    headers
}

/// `text` as a JSON string.
fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    push_json_string(&mut out, text);
    out
}

/// Appends `text` as a JSON string: quoted, with `"`, `\\` and control characters escaped.
fn push_json_string(out: &mut String, text: &str) {
    out.push('"');
    push_json_chars(out, text);
    out.push('"');
}

/// Appends `text` as the inside of a JSON string: `"`, `\\` and control characters escaped.
fn push_json_chars(out: &mut String, text: &str) {
    // one pass without an early exit, which the compiler does many bytes at a time
    let plain = text.bytes().fold(true, |plain, b| {
        plain & (b != b'"') & (b != b'\\') & (b >= 0x20)
    });
    if plain {
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
#[path = "refusal_tests.rs"]
mod tests;

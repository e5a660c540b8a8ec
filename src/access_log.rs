//! The access log: one structured line per request (target `slidegate::access`, so
//! `SLIDEGATE_LOG` can filter it; JSON with `SLIDEGATE_LOG_FORMAT=json`) with the request id,
//! route, method, path, status, rate-limit decision, the limit that decided, the derived key as
//! it is stored (hashed when it is a hashed key, so no raw secret or long value is logged),
//! the upstream's status and the durations. Routes turn it off with `access_log = false`, and
//! `access_log_sample` logs only that share of allowed requests (everything else is always
//! logged: a rejection must never go unseen).

use std::cell::Cell;
use std::time::Duration;

use crate::limit::Verdicts;
use crate::metrics::DecisionLabel;
use crate::proxy::UpstreamOutcome;
use crate::request_id::RequestId;

/// One request, as the access log sees it.
pub struct AccessEntry<'a> {
    /// The request id.
    pub request_id: &'a RequestId,
    /// The matched route, if any.
    pub route: Option<&'a str>,
    /// The method.
    pub method: &'a str,
    /// The path as the client sent it (the normalised one is what was forwarded).
    pub path: &'a str,
    /// The status the client got.
    pub status: u16,
    /// What the limiter concluded.
    pub verdicts: Option<&'a Verdicts>,
    /// The share of allowed requests to log.
    pub sample: f64,
    /// The upstream's answer, when the request was forwarded.
    pub upstream: Option<&'a UpstreamOutcome>,
    /// Time from the request head to the response head.
    pub duration: Duration,
}

/// Writes the line (unless sampling skips an allowed request).
pub fn write(entry: &AccessEntry<'_>) {
    if !tracing::enabled!(target: "slidegate::access", tracing::Level::INFO) {
        return;
    }
    let label = entry.verdicts.and_then(|v| v.label);
    let allowed = label.is_none_or(|l| l == DecisionLabel::Allowed);
    if allowed && entry.status < 400 && entry.sample < 1.0 && !sampled(entry.sample) {
        return;
    }
    tracing::info!(
        target: "slidegate::access",
        request_id = %entry.request_id,
        route = entry.route.unwrap_or("-"),
        method = entry.method,
        path = entry.path,
        status = entry.status,
        decision = label.map_or("-", DecisionLabel::as_str),
        limit = entry.verdicts.and_then(|v| v.limit.as_deref()).unwrap_or("-"),
        key = entry.verdicts.and_then(|v| v.key.as_deref()).unwrap_or("-"),
        upstream_status = entry.upstream.and_then(|u| u.status).map_or(0, |s| s),
        upstream_ms = entry.upstream.map_or(0.0, |u| u.duration.as_secs_f64() * 1000.0),
        duration_ms = entry.duration.as_secs_f64() * 1000.0,
        "request"
    );
}

/// True for a `share` of calls (a per-thread xorshift; no lock, no syscall).
fn sampled(share: f64) -> bool {
    thread_local! {
        static STATE: Cell<u64> = Cell::new(0x9E37_79B9_7F4A_7C15 ^ (std::process::id() as u64));
    }
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        (x >> 11) as f64 / (1u64 << 53) as f64 <= share
    })
}

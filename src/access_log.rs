//! The access log: one structured line per request (target `slidegate::access`, so
//! `SLIDEGATE_LOG` can filter it; JSON with `SLIDEGATE_LOG_FORMAT=json`) with the request id,
//! route, method, path, status, rate-limit decision, the limit that decided, the derived key
//! (hashed past 64 bytes, so a client cannot make lines grow without bound),
//! the upstream's status and the durations. Routes turn it off with `access_log = false`, and
//! `access_log_sample` logs only that share of allowed requests (everything else is always
//! logged: a rejection must never go unseen).

use std::cell::Cell;
use std::time::Duration;

use http::Method;

use crate::metrics::DecisionLabel;
use crate::request_id::RequestId;

/// Whether access lines are written at all (the log filter lets them through).
pub fn enabled() -> bool {
    tracing::enabled!(target: "slidegate::access", tracing::Level::INFO)
}

/// What the rate-limit layer decided for a request, as the log line shows it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Decision<'a> {
    /// The route's name.
    pub route: Option<&'a str>,
    /// Whether the route's requests are logged, and the share of its allowed requests that are.
    pub log: Option<(bool, f64)>,
    /// The request's decision.
    pub label: Option<DecisionLabel>,
    /// The limit that decided.
    pub limit: Option<&'a str>,
    /// The derived key, as logs show it.
    pub key: Option<&'a str>,
}

/// What the upstream answered, as the log line shows it.
#[derive(Debug, Clone, Copy)]
pub struct Upstream {
    /// Its status; `None` when it could not be reached or timed out.
    pub status: Option<u16>,
    /// Time until its response head.
    pub duration: Duration,
}

/// How a request ended, as its access log line shows it: the status the client got (or
/// 499 when it left first), the rate-limit decision, the upstream's answer.
pub struct Answered<'a> {
    /// The status written in the line.
    pub status: u16,
    /// What the layer decided, if it decided.
    pub decided: Option<Decision<'a>>,
    /// The upstream's answer, if the request went upstream.
    pub upstream: Option<Upstream>,
}

impl Answered<'_> {
    /// Writes the line of a request (`method`, its `path`) that ended this way after `elapsed`.
    pub fn write(&self, method: &Method, path: &str, request_id: &RequestId, elapsed: Duration) {
        let mut entry = AccessEntry::new(request_id, method, Some(path));
        if let Some(d) = self.decided {
            entry.decided(d);
        }
        if let Some(outcome) = self.upstream {
            entry.upstream(outcome);
        }
        entry.write(self.status, elapsed);
    }
}

/// One request, as the access log sees it, filled in step by step.
pub struct AccessEntry<'a> {
    request_id: &'a RequestId,
    method: &'a Method,
    path: Option<&'a str>,
    route: Option<&'a str>,
    on: bool,
    sample: f64,
    decision: Option<DecisionLabel>,
    limit: Option<&'a str>,
    key: Option<&'a str>,
    upstream: Option<Upstream>,
}

/// A duration in milliseconds with three decimals (whole microseconds), as log fields show it.
struct Millis(Duration);

impl std::fmt::Display for Millis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let us = u64::try_from(self.0.as_micros()).unwrap_or(u64::MAX);
        f.write_str(itoa::Buffer::new().format(us / 1000))?;
        let thousandths = us % 1000;
        let digits = [
            b'.',
            b'0' + (thousandths / 100) as u8,
            b'0' + (thousandths / 10 % 10) as u8,
            b'0' + (thousandths % 10) as u8,
        ];
        f.write_str(std::str::from_utf8(&digits).map_err(|_| std::fmt::Error)?)
    }
}

impl<'a> AccessEntry<'a> {
    /// A request with this id and method; `path` as the client sent it (`None` when the log is
    /// off, so nothing is copied for it).
    pub fn new(request_id: &'a RequestId, method: &'a Method, path: Option<&'a str>) -> Self {
        AccessEntry {
            request_id,
            method,
            path,
            route: None,
            on: path.is_some(),
            sample: 1.0,
            decision: None,
            limit: None,
            key: None,
            upstream: None,
        }
    }

    /// What the rate-limit layer decided: the route (with its logging settings), the decision,
    /// the limit that decided, and the key as logs show it.
    pub fn decided(&mut self, decided: Decision<'a>) {
        self.route = decided.route;
        if let Some((on, sample)) = decided.log {
            self.on &= on;
            self.sample = sample;
        }
        self.decision = decided.label;
        self.limit = decided.limit;
        self.key = decided.key;
    }

    /// The upstream's answer.
    pub fn upstream(&mut self, outcome: Upstream) {
        self.upstream = Some(outcome);
    }

    /// Writes the line (unless the log is off, or sampling skips an allowed request).
    pub fn write(&self, status: u16, duration: Duration) {
        if !self.on {
            return;
        }
        let allowed = self.decision.is_none_or(|d| d == DecisionLabel::Allowed);
        if allowed && status < 400 && self.sample < 1.0 && !sampled(self.sample) {
            return;
        }
        tracing::info!(
            target: "slidegate::access",
            request_id = %self.request_id,
            route = self.route.unwrap_or("-"),
            method = self.method.as_str(),
            path = self.path.unwrap_or("-"),
            status,
            decision = self.decision.map_or("-", DecisionLabel::as_str),
            limit = self.limit.unwrap_or("-"),
            key = self.key.unwrap_or("-"),
            upstream_status = self.upstream.and_then(|u| u.status).unwrap_or(0),
            upstream_ms = %Millis(self.upstream.map_or(Duration::ZERO, |u| u.duration)),
            duration_ms = %Millis(duration),
            "request"
        );
    }
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

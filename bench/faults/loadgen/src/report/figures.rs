//! The figures of a fault: how the requests were answered, how long the store (or upstream)
//! was gone, and how soon after its return every request was decided correctly again.

use std::collections::HashMap;

use super::records::{Request, Run};
use crate::{Outcome, ROUTES};

/// The figures of a fault, as the report lists them and its Markdown row has them.
pub struct Figures {
    /// Fail-open 200s on route `allow`.
    pub open_allow: usize,
    /// 503s on route `deny`.
    pub denied_deny: usize,
    /// 502s and 504s.
    pub upstream: usize,
    /// Requests without an answer (connect errors, resets, client timeouts).
    pub dropped: usize,
    /// Answers that neither the route's on_error nor a dead upstream explains.
    pub unexplained: usize,
    /// Those, counted by outcome and route (e.g. ``3 reset on `deny` ``), sorted.
    pub breakdown: Vec<String>,
    /// Requests sent before the fault that were not decided correctly.
    pub before_fault_bad: usize,
    /// The slowest answer, in ms.
    pub slowest: f64,
    /// Answers slower than 1 s.
    pub over_1s: usize,
    /// Requests not decided correctly after the recovery.
    pub later_bad: usize,
    /// From the fault to the store's return (`-` without both events).
    pub outage: String,
    /// From the store's return to the first request decided correctly.
    pub first_good: String,
    /// From the store's return to the recovery, or why there is none.
    pub settle: String,
    /// The share of requests the store decided in each second from the fault to the store's
    /// return (the last, shorter window only when it lasts a quarter of a second or more).
    pub outage_shares: Vec<f64>,
}

impl Figures {
    /// The figures of the run.
    pub fn of(run: &Run) -> Figures {
        let count = |f: &dyn Fn(&Request) -> bool| run.requests.iter().filter(|r| f(r)).count();
        let bad_after_back = bad_after_back(run);
        let recovered_at = recovered_at(run, &bad_after_back);
        Figures {
            open_allow: count(&|r| r.route == 0 && r.outcome == Outcome::Open),
            denied_deny: count(&|r| r.route == 1 && r.outcome == Outcome::Denied),
            upstream: count(&|r| r.outcome == Outcome::Upstream),
            dropped: count(&|r| r.outcome.dropped()),
            unexplained: count(&|r| unexplained(run, r)),
            breakdown: breakdown(run),
            before_fault_bad: count(&|r| {
                run.fault_at.is_some_and(|f| r.start_ms < f) && !correct(run, r)
            }),
            slowest: run
                .requests
                .iter()
                .map(|r| r.latency_ms)
                .fold(0.0, f64::max),
            over_1s: count(&|r| r.latency_ms > 1000.0),
            later_bad: recovered_at
                .map_or(0, |t| bad_after_back.iter().filter(|&&x| x > t).count()),
            outage: outage(run),
            first_good: first_good(run),
            settle: settle(run, recovered_at),
            outage_shares: outage_shares(run),
        }
    }
}

/// Per second from the fault (windows of 1 s, the last cut at the store's return and kept
/// when it lasts 250 ms or more), the share of the requests sent in it that the store decided:
/// how much of the keyspace the fault left working. Empty without both events.
fn outage_shares(run: &Run) -> Vec<f64> {
    let (Some(fault), Some(back)) = (run.fault_at, run.back_at) else {
        return Vec::new();
    };
    let mut shares = Vec::new();
    let mut from = fault;
    while from < back {
        let to = (from + 1000.0).min(back);
        if to - from >= 250.0 {
            let sent: Vec<&Request> = run
                .requests
                .iter()
                .filter(|r| r.start_ms >= from && r.start_ms < to)
                .collect();
            if !sent.is_empty() {
                let decided = sent.iter().filter(|r| correct(run, r)).count();
                shares.push(decided as f64 / sent.len() as f64);
            }
        }
        from = to;
    }
    shares
}

/// A request is answered correctly when the store decided it (and, in the upstream fault,
/// when the upstream's answer came back too: only 200s decided by the store).
fn correct(run: &Run, r: &Request) -> bool {
    match r.outcome {
        Outcome::Decided => true,
        Outcome::Rejected => !run.upstream_fault,
        _ => false,
    }
}

/// What the route's on_error (and, in the upstream fault, the dead upstream) cannot explain.
fn unexplained(run: &Run, r: &Request) -> bool {
    // A 502/504 whose answer came after the upstream was killed (the request may have been
    // sent just before).
    let upstream_down =
        run.upstream_fault && run.fault_at.is_some_and(|f| r.start_ms + r.latency_ms >= f);
    match (r.outcome, r.route) {
        (Outcome::Decided, _) => false,
        (Outcome::Open, 0) => false,
        (Outcome::Denied, 1) => false,
        (Outcome::Upstream, _) => !upstream_down,
        _ => true,
    }
}

/// The unexplained answers by outcome and route, sorted.
fn breakdown(run: &Run) -> Vec<String> {
    let mut by: HashMap<(usize, Outcome), u64> = HashMap::new();
    for r in run.requests.iter().filter(|r| unexplained(run, r)) {
        *by.entry((r.route, r.outcome)).or_default() += 1;
    }
    let mut breakdown: Vec<String> = by
        .into_iter()
        .map(|((route, o), n)| format!("{n} {} on `{}`", o.name(), ROUTES[route]))
        .collect();
    breakdown.sort();
    breakdown
}

/// When the requests sent from the store's return on that were not decided correctly were
/// sent (none without a `back` event).
fn bad_after_back(run: &Run) -> Vec<f64> {
    run.back_at.map_or(Vec::new(), |b| {
        run.requests
            .iter()
            .filter(|r| r.start_ms >= b && !correct(run, r))
            .map(|r| r.start_ms)
            .collect()
    })
}

/// Recovered: the start of the first whole second, from the moment the store answered
/// again, in which every request sent was decided correctly (so a lone store timeout under
/// load much later does not move it; those are counted apart).
fn recovered_at(run: &Run, bad_after_back: &[f64]) -> Option<f64> {
    let run_end = run.seconds * 1000.0;
    run.back_at.and_then(|b| {
        if bad_after_back.first().is_none_or(|&x| x >= b + 1000.0) {
            return Some(b);
        }
        let mut at = bad_after_back[bad_after_back.len() - 1];
        for w in bad_after_back.windows(2) {
            if w[1] >= w[0] + 1000.0 {
                at = w[0];
                break;
            }
        }
        // The clean second must lie within the run.
        (at + 1000.0 <= run_end).then_some(at)
    })
}

/// From the fault to the store's return, in s.
fn outage(run: &Run) -> String {
    match (run.fault_at, run.back_at) {
        (Some(f), Some(b)) => format!("{:.2} s", (b - f) / 1000.0),
        _ => "-".into(),
    }
}

/// From the store's return to the first request sent since then that was decided correctly,
/// in s.
fn first_good(run: &Run) -> String {
    let first_good_after_back = run.back_at.and_then(|b| {
        run.requests
            .iter()
            .filter(|r| r.start_ms >= b && correct(run, r))
            .map(|r| r.start_ms - b)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))))
    });
    first_good_after_back.map_or("-".into(), |ms| format!("{:.3} s", ms / 1000.0))
}

/// From the store's return to the recovery, in s; or that no request failed, or that it did
/// not recover within the run.
fn settle(run: &Run, recovered_at: Option<f64>) -> String {
    let run_end = run.seconds * 1000.0;
    let any_bad_after_fault = run
        .requests
        .iter()
        .any(|r| run.fault_at.is_some_and(|f| r.start_ms >= f) && !correct(run, r));
    match (run.back_at, recovered_at) {
        (Some(b), Some(t)) => format!("{:.2} s", (t - b) / 1000.0),
        _ if !any_bad_after_fault => "0 (no request failed)".to_string(),
        (Some(b), None) => format!(
            "never (not within the {:.1} s left of the run)",
            (run_end - b) / 1000.0
        ),
        _ => "-".into(),
    }
}

//! The counter's decisions measured against the log's: request by request, per key and window,
//! the worst window, and the estimator's own error.

use std::collections::HashMap;

use crate::settings::Settings;
use crate::trace::Event;

/// How the counter's decisions differ from the log's, request by request.
#[derive(Debug, Default)]
pub struct Disagreement {
    pub requests: u64,
    pub allowed_by_log: u64,
    pub allowed_by_counter: u64,
    pub false_allows: u64,
    pub false_denies: u64,
}

fn disagreement(counter: &[bool], log: &[bool]) -> Disagreement {
    let mut d = Disagreement {
        requests: counter.len() as u64,
        ..Disagreement::default()
    };
    for (&c, &l) in counter.iter().zip(log) {
        d.allowed_by_log += l as u64;
        d.allowed_by_counter += c as u64;
        d.false_allows += (c && !l) as u64;
        d.false_denies += (!c && l) as u64;
    }
    d
}

/// Keys denied at least once, per algorithm and by one only.
#[derive(Debug, Default)]
pub struct DeniedKeys {
    pub by_log: u64,
    pub by_counter: u64,
    /// Clients the exact limit never stopped and the counter did.
    pub by_counter_only: u64,
    /// Clients the exact limit stopped and the counter never did.
    pub by_log_only: u64,
}

fn denied_keys(trace: &[Event], counter: &[bool], log: &[bool]) -> DeniedKeys {
    let mut denied: HashMap<u32, (bool, bool)> = HashMap::new();
    for ((e, &c), &l) in trace.iter().zip(counter).zip(log) {
        let d = denied.entry(e.key).or_default();
        d.0 |= !c;
        d.1 |= !l;
    }
    let count = |f: fn(&(bool, bool)) -> bool| denied.values().filter(|d| f(d)).count() as u64;
    DeniedKeys {
        by_log: count(|d| d.1),
        by_counter: count(|d| d.0),
        by_counter_only: count(|d| d.0 && !d.1),
        by_log_only: count(|d| d.1 && !d.0),
    }
}

/// Admitted requests per (key, window of the trace).
fn admitted_per_window(
    s: &Settings,
    trace: &[Event],
    allowed: &[bool],
) -> HashMap<(u32, u64), u64> {
    let mut out = HashMap::new();
    for (e, _) in trace.iter().zip(allowed).filter(|(_, &a)| a) {
        *out.entry((e.key, (e.at - s.start_us()) / s.window_us()))
            .or_insert(0) += 1;
    }
    out
}

/// The mean rate error: over every (key, window of the trace) in which the log admitted
/// something, |admitted by the counter - admitted by the log| / admitted by the log, averaged.
/// Also how many (key, window) pairs the counter admitted in while the log admitted nothing.
fn mean_rate_error(
    counter: &HashMap<(u32, u64), u64>,
    log: &HashMap<(u32, u64), u64>,
) -> (f64, u64) {
    let (mut sum, mut pairs) = (0.0, 0u64);
    for (slot, &exact) in log {
        let approximate = counter.get(slot).copied().unwrap_or(0);
        sum += (approximate as f64 - exact as f64).abs() / exact as f64;
        pairs += 1;
    }
    let only_counter = counter
        .keys()
        .filter(|slot| !log.contains_key(slot))
        .count() as u64;
    (sum / pairs.max(1) as f64, only_counter)
}

/// The admitted instants of each key, in order.
fn admitted_by_key(trace: &[Event], allowed: &[bool]) -> HashMap<u32, Vec<u64>> {
    let mut out: HashMap<u32, Vec<u64>> = HashMap::new();
    for (e, _) in trace.iter().zip(allowed).filter(|(_, &a)| a) {
        out.entry(e.key).or_default().push(e.at);
    }
    out
}

/// The most requests one key had admitted in any window (t - window, t] of the trace.
fn most_in_any_window(admitted: &[u64], window: u64) -> u64 {
    let (mut first, mut most) = (0, 0);
    for (last, &t) in admitted.iter().enumerate() {
        while admitted[first] + window <= t {
            first += 1;
        }
        most = most.max((last + 1 - first) as u64);
    }
    most
}

/// Over-admission in the worst window of every key, as a share above the limit (0 when never
/// above): the worst over all keys, and the share of keys above 10 %.
fn over_admission(s: &Settings, by_key: &HashMap<u32, Vec<u64>>) -> (f64, f64) {
    let over: Vec<f64> = by_key
        .values()
        .map(|a| (most_in_any_window(a, s.window_us()) as f64 / s.limit as f64 - 1.0).max(0.0))
        .collect();
    let worst = over.iter().copied().fold(0.0, f64::max);
    let above = over.iter().filter(|&&o| o > 0.10).count() as f64 / s.keys as f64;
    (worst, above)
}

/// Over-admission in the worst fixed window of the trace (the counter's own windows).
fn fixed_window_over_admission(s: &Settings, per_window: &HashMap<(u32, u64), u64>) -> f64 {
    let most = per_window.values().copied().max().unwrap_or(0);
    (most as f64 / s.limit as f64 - 1.0).max(0.0)
}

/// Cloudflare's "difference between the real rate and the approximate rate": at every request
/// the counter decided, its estimate (previous * (1 - elapsed / window) + current, from what it
/// had admitted) against the real count of what it had admitted in (t - window, t], as
/// |estimate - real| / real, averaged over the requests where the real count is above 0.
fn mean_estimate_error(s: &Settings, trace: &[Event], allowed: &[bool]) -> f64 {
    let w = s.window_us();
    let mut seen: HashMap<u32, Vec<u64>> = HashMap::new();
    let (mut sum, mut n) = (0.0, 0u64);
    for (e, &a) in trace.iter().zip(allowed) {
        let admitted = seen.entry(e.key).or_default();
        let real = admitted.iter().rev().take_while(|&&t| t + w > e.at).count() as f64;
        if real > 0.0 {
            let index = e.at / w;
            let in_window = |i: u64| admitted.iter().rev().filter(|&&t| t / w == i).count() as f64;
            let elapsed = (e.at - index * w) as f64 / w as f64;
            let estimate = in_window(index - 1) * (1.0 - elapsed) + in_window(index);
            sum += (estimate - real).abs() / real;
            n += 1;
        }
        if a {
            admitted.push(e.at);
            let keep_from = admitted.partition_point(|&t| t / w + 1 < e.at / w);
            admitted.drain(..keep_from);
        }
    }
    sum / n.max(1) as f64
}

/// Everything the run reports.
pub struct Report {
    pub decisions: Disagreement,
    pub keys: DeniedKeys,
    pub rate_error: f64,
    pub counter_only_windows: u64,
    pub estimate_error: f64,
    pub counter_worst: f64,
    pub counter_keys_above: f64,
    pub counter_fixed: f64,
    pub log_worst: f64,
    /// Mean bytes per key and the keys sampled.
    pub log_bytes: (f64, usize),
    pub counter_bytes: (f64, usize),
    pub replay_secs: f64,
}

/// The counter's decisions measured against the log's.
pub fn compare(s: &Settings, trace: &[Event], counter: &[bool], log: &[bool]) -> Report {
    let counter_windows = admitted_per_window(s, trace, counter);
    let log_windows = admitted_per_window(s, trace, log);
    let (rate_error, counter_only_windows) = mean_rate_error(&counter_windows, &log_windows);
    let (counter_worst, counter_keys_above) = over_admission(s, &admitted_by_key(trace, counter));
    Report {
        decisions: disagreement(counter, log),
        keys: denied_keys(trace, counter, log),
        rate_error,
        counter_only_windows,
        estimate_error: mean_estimate_error(s, trace, counter),
        counter_worst,
        counter_keys_above,
        counter_fixed: fixed_window_over_admission(s, &counter_windows),
        log_worst: over_admission(s, &admitted_by_key(trace, log)).0,
        log_bytes: (0.0, 0),
        counter_bytes: (0.0, 0),
        replay_secs: 0.0,
    }
}

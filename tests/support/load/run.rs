//! What the load saw, and the goals every fault test asserts on it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::client::{Keys, Outcome, Rec};
use super::{log_key, BOUND, RECOVERY, ROUTES, TIMEOUT_MS};

/// What the load saw.
pub struct Run {
    pub(super) records: Vec<Rec>,
    pub(super) keys: Keys,
}

impl Run {
    /// Answers neither the route's `on_error` nor (while `upstream_down` holds for the moment
    /// the answer came) a dead upstream explains, and every dropped request, each with when it
    /// was sent.
    pub fn unexplained(&self, t0: Instant, upstream_down: impl Fn(Instant) -> bool) -> Vec<String> {
        self.records
            .iter()
            .filter(|r| match (r.outcome, r.route) {
                (Outcome::Decided, _) | (Outcome::Open, 0) | (Outcome::Status(503), 1) => false,
                (Outcome::Status(502 | 504), _) => !upstream_down(r.end),
                _ => true,
            })
            .map(|r| {
                format!(
                    "{:?} on {} sent at {} ms",
                    r.outcome,
                    ROUTES[r.route],
                    r.start.duration_since(t0).as_millis()
                )
            })
            .collect()
    }

    pub fn dropped(&self) -> usize {
        self.records
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Dropped(_)))
            .count()
    }

    pub fn slowest(&self) -> Duration {
        self.records
            .iter()
            .map(|r| r.end - r.start)
            .max()
            .unwrap_or_default()
    }

    /// Asserts that the fault showed: some request sent between `from` and `to` got `answer`
    /// (a run that never met its fault proves nothing).
    pub fn assert_fault_showed(
        &self,
        t0: Instant,
        from: Instant,
        to: Instant,
        answer: impl Fn(&Rec) -> bool,
    ) {
        assert!(
            self.count(from, to, answer) > 0,
            "the fault did not show: {}",
            self.timeline(t0)
        );
    }

    /// The requests sent between `from` and `to` for which `f` holds.
    pub fn count(&self, from: Instant, to: Instant, f: impl Fn(&Rec) -> bool) -> usize {
        self.records
            .iter()
            .filter(|r| r.start >= from && r.start < to && f(r))
            .count()
    }

    /// How long after `back` the first whole second starts in which every request sent was
    /// decided by the store (`good`) and at least one was sent; `None` if none does.
    pub fn recovered_after(&self, back: Instant, good: impl Fn(&Rec) -> bool) -> Option<Duration> {
        let last = self.records.last()?.start;
        let bad: Vec<Instant> = self
            .records
            .iter()
            .filter(|r| r.start >= back && !good(r))
            .map(|r| r.start)
            .collect();
        // From `back` itself (a request sent at that very moment counts), then from each
        // failed request on (the window starts just after it).
        let candidates = std::iter::once((back, true)).chain(bad.iter().map(|&b| (b, false)));
        for (t, inclusive) in candidates {
            let end = t + Duration::from_secs(1);
            if end > last {
                return None;
            }
            let clean = !bad
                .iter()
                .any(|&b| (b > t || (inclusive && b == t)) && b < end);
            if clean && self.count(t, end, |_| true) > 0 {
                return Some(t - back);
            }
        }
        None
    }

    /// Per second from `from` until `to` (windows of 1 s, the last cut at `to` and kept when it
    /// lasts 250 ms or more), the share of the requests sent in it that the store decided, as
    /// `bench/faults` reports it: how much of the keyspace a fault left working.
    pub fn decided_shares(&self, from: Instant, to: Instant) -> Vec<f64> {
        let mut shares = Vec::new();
        let mut start = from;
        while start < to {
            let end = (start + Duration::from_secs(1)).min(to);
            if end - start >= Duration::from_millis(250) {
                let sent = self.count(start, end, |_| true);
                let decided = self.count(start, end, |r| r.outcome == Outcome::Decided);
                if sent > 0 {
                    shares.push(decided as f64 / sent as f64);
                }
            }
            start = end;
        }
        shares
    }

    /// Requests per 250 ms from `t0`, as `decided/other`, for failure messages.
    pub fn timeline(&self, t0: Instant) -> String {
        let mut buckets: Vec<(usize, usize)> = Vec::new();
        for r in &self.records {
            let i = (r.start.duration_since(t0).as_millis() / 250) as usize;
            if buckets.len() <= i {
                buckets.resize(i + 1, (0, 0));
            }
            if r.outcome == Outcome::Decided {
                buckets[i].0 += 1;
            } else {
                buckets[i].1 += 1;
            }
        }
        buckets
            .iter()
            .enumerate()
            .map(|(i, (d, o))| format!("{:.2}s {d}/{o}", i as f64 / 4.0))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Per Redis key, the requests the store allowed whose answer arrived before `before`.
    pub fn allowed_per_key(&self, prefix: &str, before: Instant) -> HashMap<String, i64> {
        let mut out = HashMap::new();
        for r in &self.records {
            if r.outcome == Outcome::Decided && r.end < before {
                let key = log_key(prefix, ROUTES[r.route], &self.keys.users[r.user]);
                *out.entry(key).or_insert(0) += 1;
            }
        }
        out
    }
}

/// Every key whose entries in Redis (`zcard`) are fewer than the requests the store allowed.
pub fn missing(allowed: &HashMap<String, i64>, zcard: impl Fn(&str) -> i64) -> Vec<String> {
    let mut out: Vec<String> = allowed
        .iter()
        .filter_map(|(k, &n)| {
            let z = zcard(k);
            (z < n).then(|| format!("{k}: {n} allowed, {z} in Redis"))
        })
        .collect();
    out.sort();
    out
}

/// The common goals: nothing unexplained, nothing dropped, nothing slow, and a recovery within
/// [`RECOVERY`] of `back`.
pub fn assert_goals(
    run: &Run,
    t0: Instant,
    back: Instant,
    upstream_down: impl Fn(Instant) -> bool,
) {
    let recovered = run.recovered_after(back, |r| r.outcome == Outcome::Decided);
    // The figures, for `--nocapture` runs and failure logs.
    eprintln!(
        "{} requests, {} decided; store back at {:.2} s; recovered {:?} after; slowest {:?}; dropped {}",
        run.records.len(),
        run.records
            .iter()
            .filter(|r| r.outcome == Outcome::Decided)
            .count(),
        back.duration_since(t0).as_secs_f64(),
        recovered,
        run.slowest(),
        run.dropped()
    );
    let unexplained = run.unexplained(t0, upstream_down);
    assert!(
        unexplained.is_empty(),
        "{} answers unexplained by on_error, first: {:?}\ntimeline (decided/other per 250 ms): {}",
        unexplained.len(),
        &unexplained[..unexplained.len().min(10)],
        run.timeline(t0)
    );
    assert_eq!(run.dropped(), 0, "dropped requests");
    assert!(
        run.slowest() < BOUND,
        "an answer took {:?} (store.timeout is {TIMEOUT_MS} ms)",
        run.slowest()
    );
    assert!(
        recovered.is_some_and(|d| d <= RECOVERY),
        "not recovered within {RECOVERY:?} of the store answering again ({:.2} s after the start): {recovered:?}\ntimeline (decided/other per 250 ms): {}",
        back.duration_since(t0).as_secs_f64(),
        run.timeline(t0)
    );
}

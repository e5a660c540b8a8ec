//! Plain reference models of the three algorithms, written from the README's "Which algorithm" (what each one counts)
//! and section 5 (what the reset and Retry-After mean), not from the scripts or the memory store.
//!
//! Each limit only answers "how many units do you count at instant T?" ([`Units`], an exact
//! fraction). Everything else is found by asking that question: a request fits when the units
//! plus its cost are within the limit; Retry-After is the first instant it fits, nothing else
//! being counted meanwhile; the reset is the first instant the units, rounded up, drop by one
//! ("until the next unit of that quota comes back"). The stores compute the same answers in
//! closed form and in floating point; the model does neither, so it can catch them out.

use std::collections::BTreeMap;
use std::time::Duration;

use slidegate::algorithm::AlgorithmId;
use slidegate::store::{Decision, LimitSet, LimitUsage, Outcome};

/// Units a limit counts at one instant, as the exact fraction `numerator / denominator`.
#[derive(Debug, Clone, Copy)]
struct Units {
    numerator: u128,
    denominator: u128,
}

impl Units {
    fn whole(n: u64) -> Units {
        Units {
            numerator: n as u128,
            denominator: 1,
        }
    }

    /// Whether `cost` more units stay within `limit`.
    fn fit(self, cost: u64, limit: u64) -> bool {
        self.numerator + cost as u128 * self.denominator <= limit as u128 * self.denominator
    }

    /// Units counted as the headers show them: rounded up.
    fn rounded_up(self) -> u64 {
        self.numerator.div_ceil(self.denominator) as u64
    }
}

/// What one limit remembers of the units it allowed (only allowed units are recorded).
#[derive(Debug, Clone)]
enum History {
    /// `sliding_log`: the instant of every allowed unit.
    Log(Vec<u64>),
    /// `sliding_window_counter`: allowed units per fixed window, keyed by the window's index
    /// (instant / window, so fixed windows start at multiples of the window since the epoch).
    Counter(BTreeMap<u64, u64>),
    /// `gcra`: every admission (instant, units); each unit is paid back at `limit` per `window`
    /// after the ones before it, and `burst` units may be owed at once.
    Gcra(Vec<(u64, u64)>, u64),
}

/// One limit of a route: its value, its window, and what it allowed.
#[derive(Debug, Clone)]
struct LimitModel {
    limit: u64,
    window: u64,
    history: History,
}

impl LimitModel {
    /// The units counted at instant `at`, as the README's "Which algorithm" defines them (for gcra: the units
    /// still owed, a fraction, each paid back window / limit after the one before it).
    fn units_at(&self, at: u64) -> Units {
        let window = self.window;
        match &self.history {
            History::Gcra(admissions, _) => {
                // owed in microseconds times limit: each admission adds cost * window, the
                // time since the last pays back `limit` a microsecond, never below zero
                let (limit, w) = (self.limit as u128, window as u128);
                let (mut owed, mut last) = (0u128, 0u64);
                for &(t, cost) in admissions.iter().filter(|(t, _)| *t <= at) {
                    owed = owed.saturating_sub((t - last) as u128 * limit) + cost as u128 * w;
                    last = t;
                }
                owed = owed.saturating_sub((at - last.min(at)) as u128 * limit);
                Units {
                    numerator: owed,
                    denominator: w,
                }
            }
            // The entries in (at - window, at].
            History::Log(times) => {
                let live = times.iter().filter(|&&t| t <= at && at < t + window);
                Units::whole(live.count() as u64)
            }
            // previous * (1 - elapsed / window) + current, multiplied out by `window`.
            History::Counter(per_window) => {
                let index = at / window;
                let elapsed = at - index * window;
                let count = |i: Option<u64>| i.and_then(|i| per_window.get(&i)).copied();
                let current = count(Some(index)).unwrap_or(0) as u128;
                let previous = count(index.checked_sub(1)).unwrap_or(0) as u128;
                Units {
                    numerator: previous * (window - elapsed) as u128 + current * window as u128,
                    denominator: window as u128,
                }
            }
        }
    }

    fn charge(&mut self, at: u64, cost: u64) {
        match &mut self.history {
            History::Log(times) => times.extend(std::iter::repeat_n(at, cost as usize)),
            History::Counter(per_window) => {
                *per_window.entry(at / self.window).or_default() += cost
            }
            History::Gcra(admissions, _) => admissions.push((at, cost)),
        }
    }

    /// The units this limit lets through at once: its burst (gcra) or the limit.
    fn capacity(&self) -> u64 {
        match &self.history {
            History::Gcra(_, burst) => *burst,
            _ => self.limit,
        }
    }

    /// The first `t >= 0` at which `holds(units at now + t)`, nothing else being counted
    /// meanwhile. `holds` must turn true at some point and stay true: the units never grow
    /// without a charge, and both algorithms count nothing two windows after the last charge.
    fn first_wait(&self, now: u64, holds: impl Fn(Units) -> bool) -> u64 {
        let (mut low, mut high) = (0, 2 * self.window * self.capacity().max(1));
        assert!(
            holds(self.units_at(now + high)),
            "nothing is counted two windows on"
        );
        while low < high {
            let mid = low + (high - low) / 2;
            if holds(self.units_at(now + mid)) {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        low
    }

    /// Until this limit alone lets `cost` units through: 0 when it has room now. A request
    /// larger than the limit never fits; the stores then answer one window (a convention of the
    /// reply layout, not something the README promises).
    fn wait(&self, now: u64, cost: u64) -> u64 {
        let capacity = self.capacity();
        if self.units_at(now).fit(cost, capacity) {
            0
        } else if cost > capacity {
            self.window
        } else {
            self.first_wait(now, |u| u.fit(cost, capacity))
        }
    }

    /// Units counted as the headers show them: rounded up; for gcra, the limit less the whole
    /// units that fit now.
    fn used(&self, now: u64) -> u64 {
        let units = self.units_at(now);
        match &self.history {
            History::Gcra(_, burst) => {
                let free = (*burst as u128 * units.denominator).saturating_sub(units.numerator)
                    / units.denominator;
                self.limit - (free as u64).min(self.limit)
            }
            _ => units.rounded_up(),
        }
    }

    /// Until the next unit of the quota comes back: the units used drop by one.
    fn reset(&self, now: u64) -> u64 {
        let used = self.used(now);
        if used == 0 {
            return 0;
        }
        let (mut low, mut high) = (0, 2 * self.window.max(1) * self.capacity().max(1));
        while low < high {
            let mid = low + (high - low) / 2;
            if self.used(now + mid) < used {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        low
    }
}

/// The reference for one key of a route: every limit decided together, all charged or none.
#[derive(Debug, Clone)]
pub struct Reference {
    limits: Vec<LimitModel>,
}

impl Reference {
    /// A key with nothing counted yet under the limits of `set` (their algorithms, values and
    /// windows; blocks are not modelled).
    pub fn of(set: &LimitSet) -> Reference {
        let limits = set
            .limits
            .iter()
            .enumerate()
            .map(|(i, l)| LimitModel {
                limit: l.limit,
                window: l.window_us,
                history: match set.algorithm_of(i) {
                    AlgorithmId::SLIDING_LOG => History::Log(Vec::new()),
                    AlgorithmId::SLIDING_WINDOW_COUNTER => History::Counter(BTreeMap::new()),
                    _ => History::Gcra(Vec::new(), if l.param == 0 { l.limit } else { l.param }),
                },
            })
            .collect();
        Reference { limits }
    }

    /// Decides a request of `cost` units at `now` (µs), charging it when every limit has
    /// room, and answers what a store must answer: the outcome, the wait (the longest of the
    /// limits that refuse), and every limit's units, reset and own wait after the decision.
    pub fn decide(&mut self, now: u64, cost: u64) -> Decision {
        let waits: Vec<u64> = self.limits.iter().map(|l| l.wait(now, cost)).collect();
        let retry = waits.iter().copied().max().unwrap_or(0);
        if retry == 0 {
            for limit in &mut self.limits {
                limit.charge(now, cost);
            }
        }
        let limits = self
            .limits
            .iter()
            .zip(&waits)
            .map(|(l, &wait)| LimitUsage {
                used: l.used(now),
                limit: l.limit,
                reset: Duration::from_micros(l.reset(now)),
                retry_after: Duration::from_micros(wait),
                in_flight: false,
            })
            .collect();
        Decision {
            outcome: if retry == 0 {
                Outcome::Allowed
            } else {
                Outcome::Rejected
            },
            retry_after: Duration::from_micros(retry),
            limits,
            decided_at_us: now,
            block_level: 0,
            block_left: Duration::ZERO,
            receipt: None,
            approximate: false,
        }
    }
}

//! `sliding_log` (exact, the default): one sorted set per (route, key, counting class) holds an
//! entry per allowed unit; each limit counts the entries of its own window. `lua/sliding_log.lua`
//! is the script's piece; [`LogState`] is its twin for the memory store.

use std::collections::VecDeque;

use super::seam::{expiry_after, Algorithm, KeyState, LimitParams, Settled, EXACT_IN_A_DOUBLE};

/// A `sliding_log` limit stores one entry per counted unit: beyond this it would hold too much.
pub const MAX_LIMIT: u64 = 10_000;

/// The exact sliding log.
pub struct SlidingLog;

impl Algorithm for SlidingLog {
    fn name(&self) -> &'static str {
        "sliding_log"
    }

    fn lua(&self) -> &'static str {
        include_str!("../../lua/sliding_log.lua")
    }

    fn key_suffix(&self) -> &'static str {
        "#log"
    }

    fn shares_charges(&self) -> bool {
        true
    }

    fn check(&self, limit: u64, window_us: u64, _burst: Option<u64>) -> Result<(), String> {
        if limit > MAX_LIMIT {
            return Err(format!(
                "a sliding_log limit holds at most {MAX_LIMIT} (it stores one entry per counted unit); for more, use algorithm = \"sliding_window_counter\" or \"gcra\""
            ));
        }
        // the bound every algorithm keeps, so a limit may change algorithm and stay valid
        if limit as u128 * window_us as u128 >= EXACT_IN_A_DOUBLE {
            return Err(format!(
                "limit * window must stay below 2^53 microseconds (here {limit} * {window_us} µs), as for every algorithm; lower the limit or the window"
            ));
        }
        Ok(())
    }

    fn new_state(&self) -> Box<dyn KeyState> {
        Box::new(LogState::default())
    }
}

/// One sorted set: entries `(score, member)` in Redis order, and the call's pending members.
#[derive(Clone, Default)]
pub struct LogState {
    entries: VecDeque<(u64, String)>,
    /// The longest window of the call (`open`).
    window: u64,
    views: Vec<LogView>,
    pending: Vec<String>,
    charged: u64,
    /// How far ahead of `now` the call's charges are written: a reservation's `settle`.
    ahead: u64,
}

/// `stored` entries inside `window`, the first of them at rank `off`.
#[derive(Clone)]
struct LogView {
    window: u64,
    stored: usize,
    off: usize,
}

/// What ends the member of an answered entry (the script's `confirm`): a reset forgives these
/// and keeps the others, the reservations still in flight.
const ANSWERED: char = '!';
/// What ends the member of an entry kept without an answer (the script's `unanswered`).
const UNANSWERED: char = '?';

/// The members of a charge of `cost` units whose first is `member`.
fn units(member: &str, cost: u64) -> Vec<String> {
    (1..=cost).map(|j| unit(member, j)).collect()
}

/// The member of unit `j` (from 1) of a charge whose first is `member`.
fn unit(member: &str, j: u64) -> String {
    match j {
        1 => member.to_string(),
        j => format!("{member}.{j}"),
    }
}

impl LogState {
    fn used(&self, v: &LogView) -> u64 {
        (v.stored + self.pending.len()) as u64
    }

    /// Adds an entry where Redis keeps it (equal scores in member order).
    fn insert(&mut self, score: u64, member: String) {
        let at = self
            .entries
            .partition_point(|(s, m)| (*s, m.as_str()) <= (score, member.as_str()));
        self.entries.insert(at, (score, member));
    }

    /// Gives the entries of a charge of `cost` units whose first is `member`, made at `at`, the
    /// ending `mark`, as the script's `confirm` and `unanswered` do: a reservation written
    /// ahead goes back to its charge's instant, where an answered attempt counts.
    fn mark(&mut self, member: &str, at: u64, cost: u64, mark: String) {
        for m in units(member, cost) {
            let Some(i) = self.entries.iter().position(|(_, e)| *e == m) else {
                continue;
            };
            let (score, _) = self.entries.remove(i).expect("found");
            self.insert(score.min(at), format!("{m}{mark}"));
        }
    }
}

impl KeyState for LogState {
    fn duplicate(&self) -> Box<dyn KeyState> {
        Box::new(self.clone())
    }

    fn open(&mut self, now: u64, window: u64, _bound: u64) {
        self.window = window;
        self.views.clear();
        self.pending.clear();
        self.charged = 0;
        self.ahead = 0;
        let horizon = now as i64 - window as i64;
        while self
            .entries
            .front()
            .is_some_and(|(score, _)| *score as i64 <= horizon)
        {
            self.entries.pop_front();
        }
    }

    fn view(&mut self, limit: &LimitParams<'_>, now: u64) -> usize {
        if let Some(i) = self.views.iter().position(|v| v.window == limit.window) {
            return i;
        }
        let n = self.entries.len();
        let stored = if limit.window < self.window && n > 0 {
            let horizon = now as i64 - limit.window as i64;
            self.entries
                .iter()
                .rev()
                .take_while(|(score, _)| *score as i64 > horizon)
                .count()
        } else {
            n
        };
        self.views.push(LogView {
            window: limit.window,
            stored,
            off: n - stored,
        });
        self.views.len() - 1
    }

    fn fits(&self, view: usize, limit: u64, cost: u64) -> bool {
        self.used(&self.views[view]) + cost <= limit
    }

    fn wait(&self, view: usize, limit: u64, cost: u64, now: u64) -> i64 {
        let v = &self.views[view];
        if cost > limit {
            return v.window as i64;
        }
        let k = (self.used(v) + cost - limit - 1) as usize;
        let mut w = v.window as i64;
        if k < v.stored {
            w = self.entries[v.off + k].0 as i64 + v.window as i64 - now as i64;
        }
        w.max(1)
    }

    fn charge(&mut self, _view: usize, cost: u64, member: &str, d: u64, settle: u64) {
        self.ahead = self.ahead.max(settle);
        if self.charged == d {
            return;
        }
        self.charged = d;
        self.pending.push(member.to_string());
        for j in 2..=cost {
            self.pending.push(format!("{member}.{j}"));
        }
    }

    fn report(&self, view: usize, now: u64) -> (i64, i64) {
        let v = &self.views[view];
        let count = self.used(v) as i64;
        if count == 0 {
            return (0, 0);
        }
        let oldest = if v.stored > 0 {
            self.entries[v.off].0
        } else {
            now
        };
        (count, (oldest as i64 + v.window as i64 - now as i64).max(0))
    }

    fn refund(&mut self, _limit: &LimitParams<'_>, member: &str, _at: u64, cost: u64, _now: u64) {
        let members = units(member, cost);
        self.entries.retain(|(_, m)| !members.contains(m));
    }

    fn in_flight(
        &self,
        view: usize,
        _name: &str,
        limit: u64,
        cost: u64,
        settle: u64,
        now: u64,
    ) -> i64 {
        let v = &self.views[view];
        let horizon = now as i64 - v.window as i64;
        let live = self.entries.iter().filter(|(s, _)| *s as i64 > horizon);
        let (mut answered, mut soonest, mut kept) = (0u64, None, false);
        for (score, member) in live {
            if member.ends_with(ANSWERED) {
                answered += 1;
            } else if member.ends_with(UNANSWERED) {
                kept = true;
            } else if soonest.is_none() {
                // written `settle` after its charge; past that: kept without an answer
                match *score > now {
                    true => soonest = Some(*score),
                    false => kept = true,
                }
            }
        }
        if answered + cost > limit {
            return 0;
        }
        if soonest.is_none() && kept {
            return -1;
        }
        let soonest = soonest.unwrap_or(now + settle) as i64;
        (soonest - now as i64).max(1)
    }

    fn confirm(
        &mut self,
        _limit: &LimitParams<'_>,
        member: &str,
        at: u64,
        cost: u64,
        tag: &str,
        _now: u64,
    ) {
        self.mark(member, at, cost, format!("{tag}{ANSWERED}"));
    }

    fn unanswered(&mut self, _limit: &LimitParams<'_>, member: &str, at: u64, cost: u64, _: u64) {
        self.mark(member, at, cost, UNANSWERED.to_string());
    }

    fn settle(&mut self, _limit: &LimitParams<'_>, c: &Settled<'_>, now: u64) -> Option<u64> {
        if c.amount < c.cost {
            let gone: std::collections::HashSet<String> =
                (c.amount + 1..=c.cost).map(|j| unit(c.member, j)).collect();
            self.entries.retain(|(_, m)| !gone.contains(m));
            return None;
        }
        if c.amount == c.cost {
            return None;
        }
        for j in c.cost + 1..=c.amount {
            self.insert(now, unit(c.member, j));
        }
        Some(c.longest.div_ceil(1000))
    }

    fn clear(&mut self, _name: &str, tag: &str, _now: u64) -> bool {
        let ending = format!("{tag}{ANSWERED}");
        self.entries.retain(|(_, m)| !m.ends_with(&ending));
        self.entries.is_empty()
    }

    fn finish(&mut self, now: u64) -> Option<u64> {
        if self.pending.is_empty() {
            return None;
        }
        let at = now + self.ahead;
        for member in std::mem::take(&mut self.pending) {
            self.insert(at, member);
        }
        Some(expiry_after(at, self.window))
    }

    fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.pending.is_empty()
    }
}

//! `sliding_window_counter` (approximate, constant memory): two fixed-window counters per limit,
//! every counter limit of a key in one hash. `lua/sliding_window_counter.lua` is the script's
//! piece; [`CounterState`] is its twin for the memory store, with the same floating-point steps.

use std::collections::HashMap;

use super::seam::{expiry_after, Algorithm, KeyState, LimitParams, Settled, EXACT_IN_A_DOUBLE};

/// The approximate sliding window.
pub struct SlidingWindowCounter;

impl Algorithm for SlidingWindowCounter {
    fn name(&self) -> &'static str {
        "sliding_window_counter"
    }

    fn lua(&self) -> &'static str {
        include_str!("../../lua/sliding_window_counter.lua")
    }

    fn key_suffix(&self) -> &'static str {
        "#swc"
    }

    fn shares_charges(&self) -> bool {
        false
    }

    fn check(&self, limit: u64, window_us: u64, _burst: Option<u64>) -> Result<(), String> {
        if limit as u128 * window_us as u128 >= EXACT_IN_A_DOUBLE {
            return Err(format!(
                "limit * window must stay below 2^53 microseconds for the counter's arithmetic to be exact (here {limit} * {window_us} µs); lower the limit or the window"
            ));
        }
        Ok(())
    }

    fn new_state(&self) -> Box<dyn KeyState> {
        Box::new(CounterState::default())
    }
}

/// One hash: per limit `(index of the current fixed window, its count, the previous count,
/// window length)`; per limit whose charges were confirmed, the answered units `(index, in that
/// window, in the one before)` (the script's `<limit>!` field), and in the same form the units
/// kept without an answer (`<limit>?`); and the call's views.
#[derive(Clone, Default)]
pub struct CounterState {
    fields: HashMap<String, (u64, u64, u64, u64)>,
    answered: HashMap<String, Tally>,
    unanswered: HashMap<String, Tally>,
    views: Vec<CounterView>,
}

/// Units tallied by fixed window: `(index, units in that window, in the one before)`.
type Tally = (u64, u64, u64);

/// A limit's counter at the call's instant (`view` in Lua).
#[derive(Clone)]
struct CounterView {
    name: String,
    window: f64,
    index: u64,
    elapsed: f64,
    cur: f64,
    prev: f64,
    charged: bool,
}

/// Which tally a settlement adds to.
enum Side {
    /// `<limit>!`
    Answered,
    /// `<limit>?`
    Unanswered,
}

impl CounterState {
    /// Adds `cost` units charged at `at` to one tally of `limit` (`add_to_tally` in Lua): only
    /// while its counter still counts them.
    fn add_to_tally(&mut self, side: Side, limit: &LimitParams<'_>, at: u64, cost: u64) {
        let Some(&(w, _, _, l)) = self.fields.get(limit.name) else {
            return;
        };
        let index = at / limit.window;
        if l != limit.window || index + 1 < w {
            return;
        }
        let tallies = match side {
            Side::Answered => &mut self.answered,
            Side::Unanswered => &mut self.unanswered,
        };
        let next = match tallies.get(limit.name).copied() {
            None => (index, cost, 0),
            Some((i, _, _)) if i + 1 < index => (index, cost, 0),
            Some((i, a, _)) if i + 1 == index => (index, cost, a),
            Some((i, a, b)) if i == index => (i, a + cost, b),
            Some((i, a, b)) if i == index + 1 => (i, a, b + cost),
            Some(_) => return,
        };
        set(tallies, limit.name, next);
    }
}

impl CounterView {
    /// The units of a tally that weigh in this view: in its fixed window, and in the one before
    /// (`weighed` in Lua).
    fn weighed(&self, tally: Option<&Tally>) -> (f64, f64) {
        match tally {
            Some(&(i, a, b)) if i == self.index => (a as f64, b as f64),
            Some(&(i, a, _)) if i + 1 == self.index => (0.0, a as f64),
            _ => (0.0, 0.0),
        }
    }

    /// The previous window's weight times the window (`base` in Lua).
    fn base(&self) -> f64 {
        self.prev * (self.window - self.elapsed)
    }

    /// Time from now until the estimate is at most `target` (`time_until` in Lua).
    fn time_until(&self, target: f64) -> i64 {
        let (w, e) = (self.window, self.elapsed);
        if target < 0.0 {
            return w as i64;
        }
        if self.cur <= target {
            if self.prev == 0.0 {
                return 0;
            }
            let t = (w - e) - (target - self.cur) * w / self.prev;
            return if t < 0.0 { 0 } else { t.ceil() as i64 };
        }
        ((w - e) + w * (self.cur - target) / self.cur).ceil() as i64
    }
}

/// Sets `map[name]` to `value`, copying the name only when the map does not hold it yet (the
/// usual case: a key's counters are written again on each of its decisions).
fn set<V>(map: &mut HashMap<String, V>, name: &str, value: V) {
    match map.get_mut(name) {
        Some(held) => *held = value,
        None => {
            map.insert(name.to_owned(), value);
        }
    }
}

/// The estimate at `now`, rounded up, of counts `(w, c, p)` kept under a window of length `l`:
/// what a limit whose window a reload changed carries into its current fixed window (its fixed
/// windows no longer line up; the count survives, weighing whole until that window ends).
/// Computed in doubles as the script does, so both stores agree.
fn carried((w, c, p, l): (u64, u64, u64, u64), now: u64) -> u64 {
    let index = now / l;
    let (cur, prev) = match w {
        w if w == index => (c, p),
        w if w + 1 == index => (0, c),
        _ => (0, 0),
    };
    let elapsed = (now - index * l) as f64;
    ((prev as f64 * (l as f64 - elapsed) + cur as f64 * l as f64) / l as f64).ceil() as u64
}

impl KeyState for CounterState {
    fn duplicate(&self) -> Box<dyn KeyState> {
        Box::new(self.clone())
    }

    fn open(&mut self, _now: u64, _window: u64, _bound: u64) {
        self.views.clear();
    }

    fn view(&mut self, limit: &LimitParams<'_>, now: u64) -> usize {
        if let Some(i) = self.views.iter().position(|v| v.name == limit.name) {
            return i;
        }
        let window = limit.window;
        let index = now / window;
        let (mut cur, mut prev, mut carrying) = (0, 0, false);
        if let Some(&(w, c, p, l)) = self.fields.get(limit.name) {
            if l == window {
                if w == index {
                    (cur, prev) = (c, p);
                } else if w + 1 == index {
                    prev = c;
                }
            } else {
                // written back in the new window's layout, so it weighs by the new window
                (cur, carrying) = (carried((w, c, p, l), now), true);
            }
        }
        self.views.push(CounterView {
            name: limit.name.to_string(),
            window: window as f64,
            index,
            elapsed: (now - index * window) as f64,
            cur: cur as f64,
            prev: prev as f64,
            charged: carrying,
        });
        self.views.len() - 1
    }

    fn fits(&self, view: usize, limit: u64, cost: u64) -> bool {
        let v = &self.views[view];
        v.base() + (v.cur + cost as f64) * v.window <= limit as f64 * v.window
    }

    fn wait(&self, view: usize, limit: u64, cost: u64, _now: u64) -> i64 {
        self.views[view]
            .time_until(limit as f64 - cost as f64)
            .max(1)
    }

    fn charge(&mut self, view: usize, cost: u64, _member: &str, _d: u64, _settle: u64) {
        let v = &mut self.views[view];
        v.cur += cost as f64;
        v.charged = true;
    }

    fn report(&self, view: usize, _now: u64) -> (i64, i64) {
        let v = &self.views[view];
        let used = ((v.base() + v.cur * v.window) / v.window).ceil() as i64;
        if used <= 0 {
            return (0, 0);
        }
        (used, v.time_until((used - 1) as f64))
    }

    fn refund(&mut self, limit: &LimitParams<'_>, _member: &str, at: u64, cost: u64, _now: u64) {
        let Some((w, c, p, l)) = self.fields.get_mut(limit.name) else {
            return;
        };
        if *l != limit.window {
            return;
        }
        let index = at / limit.window;
        if *w == index {
            *c = c.saturating_sub(cost);
        } else if *w == index + 1 {
            *p = p.saturating_sub(cost);
        }
    }

    fn in_flight(
        &self,
        view: usize,
        name: &str,
        limit: u64,
        cost: u64,
        settle: u64,
        _now: u64,
    ) -> i64 {
        let v = &self.views[view];
        let w = v.window;
        let refuses = |(cur, prev): (f64, f64)| {
            prev * (w - v.elapsed) + (cur + cost as f64) * w > limit as f64 * w
        };
        let (cur, prev) = v.weighed(self.answered.get(name));
        if refuses((cur, prev)) {
            return 0;
        }
        let (kept_cur, kept_prev) = v.weighed(self.unanswered.get(name));
        if refuses((cur + kept_cur, prev + kept_prev)) {
            return -1;
        }
        settle as i64
    }

    fn confirm(
        &mut self,
        limit: &LimitParams<'_>,
        _member: &str,
        at: u64,
        cost: u64,
        _tag: &str,
        _now: u64,
    ) {
        self.add_to_tally(Side::Answered, limit, at, cost);
    }

    fn unanswered(&mut self, limit: &LimitParams<'_>, _: &str, at: u64, cost: u64, _now: u64) {
        self.add_to_tally(Side::Unanswered, limit, at, cost);
    }

    fn settle(&mut self, limit: &LimitParams<'_>, c: &Settled<'_>, now: u64) -> Option<u64> {
        if c.amount < c.cost {
            self.refund(limit, c.member, c.at, c.cost - c.amount, now);
            return None;
        }
        if c.amount == c.cost {
            return None;
        }
        let (extra, window) = (c.amount - c.cost, limit.window);
        let index = now / window;
        let stored = match self.fields.get(limit.name) {
            Some(&(w, c, p, l)) if l == window => Some((w, c, p)),
            _ => None,
        };
        let next = match stored {
            Some((w, c, p)) if w == index => (index, c + extra, p),
            Some((w, c, _)) if w + 1 == index => (index, extra, c),
            _ => (index, extra, 0),
        };
        set(
            &mut self.fields,
            limit.name,
            (next.0, next.1, next.2, window),
        );
        Some((2 * window).div_ceil(1000))
    }

    fn clear(&mut self, name: &str, _tag: &str, _now: u64) -> bool {
        let answered = self.answered.remove(name);
        let (Some((i, a, b)), Some(&(w, c, p, l))) = (answered, self.fields.get(name)) else {
            return true;
        };
        let units_in = |index: u64| match index {
            _ if index == i => a,
            _ if index + 1 == i => b,
            _ => 0,
        };
        let c = c.saturating_sub(units_in(w));
        let p = match w.checked_sub(1) {
            Some(before) => p.saturating_sub(units_in(before)),
            None => p,
        };
        if c == 0 && p == 0 {
            self.fields.remove(name);
            self.unanswered.remove(name);
        } else {
            set(&mut self.fields, name, (w, c, p, l));
        }
        true
    }

    fn finish(&mut self, now: u64) -> Option<u64> {
        let mut ttl = 0u64;
        for v in self.views.iter().filter(|v| v.charged) {
            let window = v.window as u64;
            let counter = (v.index, v.cur as u64, v.prev as u64, window);
            set(&mut self.fields, &v.name, counter);
            ttl = ttl.max(2 * window);
        }
        (ttl > 0).then(|| expiry_after(now, ttl))
    }

    fn is_empty(&self) -> bool {
        self.fields.is_empty() && self.answered.is_empty() && self.unanswered.is_empty()
    }
}

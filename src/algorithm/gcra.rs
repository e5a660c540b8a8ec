//! `gcra` (generic cell rate algorithm, O(1) memory): `limit` per `window` as a steady rate with
//! a burst of up to `burst` (the limit when unset), and an exact `Retry-After`. The state is one
//! number per key and limit, the debt, in microseconds times the limit so that every step is
//! whole-number arithmetic. `lua/gcra.lua` is the script's piece; [`GcraState`] its twin.

use std::collections::HashMap;

use super::seam::{expiry_after, Algorithm, KeyState, LimitParams, Settled, EXACT_IN_A_DOUBLE};

/// The generic cell rate algorithm.
pub struct Gcra;

impl Algorithm for Gcra {
    fn name(&self) -> &'static str {
        "gcra"
    }

    fn lua(&self) -> &'static str {
        include_str!("../../lua/gcra.lua")
    }

    fn key_suffix(&self) -> &'static str {
        "#gcra"
    }

    fn shares_charges(&self) -> bool {
        false
    }

    fn takes_burst(&self) -> bool {
        true
    }

    fn check(&self, limit: u64, window_us: u64, burst: Option<u64>) -> Result<(), String> {
        let burst = burst.unwrap_or(limit);
        if burst.max(limit) as u128 * window_us as u128 >= EXACT_IN_A_DOUBLE {
            return Err(format!(
                "burst (or limit) * window must stay below 2^53 microseconds for gcra's arithmetic to be exact (here {} * {window_us} µs); lower them",
                burst.max(limit)
            ));
        }
        Ok(())
    }

    fn new_state(&self) -> Box<dyn KeyState> {
        Box::new(GcraState::default())
    }
}

/// What a field holds: window, limit, time of the last charge, the debt then, the debt before
/// that charge, and that charge's member.
#[derive(Clone)]
struct Field {
    window: u64,
    limit: u64,
    at: u64,
    debt: u64,
    prev: u64,
    member: String,
}

/// One hash of gcra fields; per limit, the answered units that may still weigh in its debt
/// `(units, charge instant of the earliest)` (the script's `<limit>!` field), and in the same
/// form the units kept without an answer (`<limit>?`); the call's views.
#[derive(Clone, Default)]
pub struct GcraState {
    fields: HashMap<String, Field>,
    answered: HashMap<String, (u64, u64)>,
    unanswered: HashMap<String, (u64, u64)>,
    views: Vec<GcraView>,
}

/// What `units` charged from `earliest` on still owe at least at `now`, in the debt's units:
/// the debt pays back `limit` a microsecond whoever owes it.
fn still_owed(units: u64, earliest: u64, window: u64, limit: u64, now: u64) -> i128 {
    units as i128 * window as i128 - now.saturating_sub(earliest) as i128 * limit as i128
}

impl GcraState {
    /// Counts an answered charge among those a reset forgives (units that owe nothing any more
    /// are dropped first: the bound only shrinks).
    fn add_answered(&mut self, limit: &LimitParams<'_>, at: u64, cost: u64, now: u64) {
        add_units(&mut self.answered, limit, at, cost, now);
    }

    /// Whether the key still holds `limit`'s debt as configured (under a changed limit the debt
    /// is carried over, but what it owed then is nothing to tally).
    fn holds(&self, limit: &LimitParams<'_>) -> bool {
        self.fields
            .get(limit.name)
            .is_some_and(|f| f.window == limit.window && f.limit == limit.limit)
    }
}

/// Adds `cost` units charged at `at` to `limit`'s units in `side` (`add_units` in Lua).
fn add_units(
    side: &mut HashMap<String, (u64, u64)>,
    limit: &LimitParams<'_>,
    at: u64,
    cost: u64,
    now: u64,
) {
    let entry = side.entry(limit.name.to_string()).or_insert((0, at));
    *entry = match *entry {
        (u, e) if still_owed(u, e, limit.window, limit.limit, now) > 0 => (u + cost, e.min(at)),
        _ => (cost, at),
    };
}

#[derive(Clone)]
struct GcraView {
    name: String,
    window: u64,
    limit: u64,
    burst: u64,
    debt: u64,
    prev: u64,
    member: String,
    charged: bool,
}

/// The largest whole number a double holds exactly (the script's arithmetic).
const MAX_EXACT: u64 = (1 << 53) - 1;

/// What a debt kept under a window of `from` owes under a window of `to` (a reload changed the
/// limit's window): the units still owed carry over, each costing the new window, rounded up,
/// at most [`MAX_EXACT`]; computed in doubles as the script does, so both stores agree. A
/// changed limit alone keeps the debt: one unit costs the window whatever the limit.
fn carried(debt: u64, from: u64, to: u64) -> u64 {
    if from == to || debt == 0 {
        return debt;
    }
    let d = (debt as f64 * to as f64 / from as f64).ceil();
    (d as u64).min(MAX_EXACT)
}

/// The debt at `now` of `debt` left at `at`: it pays back `limit` a microsecond.
fn decayed(debt: u64, at: u64, limit: u64, now: u64) -> u64 {
    if now <= at || debt == 0 {
        return debt;
    }
    let elapsed = now - at;
    if elapsed >= debt.div_ceil(limit) {
        0
    } else {
        debt - elapsed * limit
    }
}

impl KeyState for GcraState {
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
        let burst = if limit.param == 0 {
            limit.limit
        } else {
            limit.param
        };
        // counts survive a reload: a debt kept under another limit or window carries over, and
        // is written back as the new limit's (it pays back at the new rate from now on)
        let (debt, carrying) = match self.fields.get(limit.name) {
            Some(f) => (
                carried(decayed(f.debt, f.at, f.limit, now), f.window, limit.window),
                f.window != limit.window || f.limit != limit.limit,
            ),
            None => (0, false),
        };
        self.views.push(GcraView {
            name: limit.name.to_string(),
            window: limit.window,
            limit: limit.limit,
            burst,
            debt,
            prev: debt,
            member: "-".to_string(),
            charged: carrying,
        });
        self.views.len() - 1
    }

    fn fits(&self, view: usize, _limit: u64, cost: u64) -> bool {
        let v = &self.views[view];
        v.debt as u128 + cost as u128 * v.window as u128 <= v.burst as u128 * v.window as u128
    }

    fn wait(&self, view: usize, _limit: u64, cost: u64, _now: u64) -> i64 {
        let v = &self.views[view];
        if cost > v.burst {
            return v.window as i64;
        }
        let over = v.debt as i128 + (cost as i128 - v.burst as i128) * v.window as i128;
        (over.max(0) as u128).div_ceil(v.limit as u128).max(1) as i64
    }

    fn charge(&mut self, view: usize, cost: u64, member: &str, _d: u64, _settle: u64) {
        let v = &mut self.views[view];
        v.prev = v.debt;
        v.debt += cost * v.window;
        v.member = member.to_string();
        v.charged = true;
    }

    fn report(&self, view: usize, _now: u64) -> (i64, i64) {
        let v = &self.views[view];
        let (w, limit) = (v.window as i128, v.limit as i128);
        // Counted up to the limit: a burst above it is room the headers do not show.
        let remaining = ((v.burst as i128 * w - v.debt as i128).div_euclid(w)).clamp(0, limit);
        let used = limit - remaining;
        if used == 0 {
            return (0, 0);
        }
        let owed = v.debt as i128 - (v.burst as i128 - remaining - 1) * w;
        let reset = if owed <= 0 {
            0
        } else {
            (owed as u128).div_ceil(limit as u128) as i64
        };
        (used as i64, reset)
    }

    fn refund(&mut self, limit: &LimitParams<'_>, member: &str, at: u64, cost: u64, now: u64) {
        let Some(f) = self.fields.get_mut(limit.name) else {
            return;
        };
        if f.window != limit.window || f.limit != limit.limit {
            return;
        }
        if f.member != member {
            self.add_answered(limit, at, cost, now);
            return;
        }
        f.debt = f.prev;
        f.member = "-".to_string();
    }

    fn in_flight(
        &self,
        view: usize,
        name: &str,
        _limit: u64,
        cost: u64,
        settle: u64,
        now: u64,
    ) -> i64 {
        let v = &self.views[view];
        let owed_by = |side: &HashMap<String, (u64, u64)>| {
            side.get(name).map_or(0, |&(units, earliest)| {
                still_owed(units, earliest, v.window, v.limit, now).max(0)
            })
        };
        let room = (v.burst as i128 - cost as i128) * v.window as i128;
        let owed = owed_by(&self.answered);
        if owed > room {
            return 0;
        }
        if owed + owed_by(&self.unanswered) > room {
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
        now: u64,
    ) {
        if self.holds(limit) {
            self.add_answered(limit, at, cost, now);
        }
    }

    fn unanswered(&mut self, limit: &LimitParams<'_>, _: &str, at: u64, cost: u64, now: u64) {
        if self.holds(limit) {
            add_units(&mut self.unanswered, limit, at, cost, now);
        }
    }

    fn settle(&mut self, limit: &LimitParams<'_>, c: &Settled<'_>, now: u64) -> Option<u64> {
        let (window, per) = (limit.window, limit.limit);
        let field = self.fields.get_mut(limit.name);
        if c.amount == c.cost
            || field
                .as_ref()
                .is_some_and(|f| f.window != window || f.limit != per)
        {
            return None;
        }
        if c.amount < c.cost {
            // exact for the key's latest charge only; an older one stays whole (strict side)
            if let Some(f) = field.filter(|f| f.member == c.member) {
                f.debt = f
                    .debt
                    .saturating_sub((c.cost - c.amount) * window)
                    .max(f.prev);
                f.member = "-".to_string();
            }
            return None;
        }
        let (debt, at) = field.map_or((0, now), |f| (f.debt, f.at));
        let owed = decayed(debt, at, per, now) + (c.amount - c.cost) * window;
        self.fields.insert(
            limit.name.to_string(),
            Field {
                window,
                limit: per,
                at: at.max(now),
                debt: owed,
                prev: owed,
                member: "-".to_string(),
            },
        );
        Some((owed.div_ceil(per) + 1000).div_ceil(1000))
    }

    fn clear(&mut self, name: &str, _tag: &str, now: u64) -> bool {
        let answered = self.answered.remove(name);
        let (Some((units, earliest)), Some(f)) = (answered, self.fields.get(name)) else {
            return true;
        };
        let owed = decayed(f.debt, f.at, f.limit, now);
        let forgiven = still_owed(units, earliest, f.window, f.limit, now);
        if forgiven <= 0 {
            return true;
        }
        if forgiven >= owed as i128 {
            self.fields.remove(name);
            self.unanswered.remove(name);
            return true;
        }
        let left = owed - forgiven as u64;
        let at = now.max(f.at);
        let (window, limit) = (f.window, f.limit);
        self.fields.insert(
            name.to_string(),
            Field {
                window,
                limit,
                at,
                debt: left,
                prev: left,
                member: "-".to_string(),
            },
        );
        true
    }

    fn finish(&mut self, now: u64) -> Option<u64> {
        let mut ttl = 0u64;
        for v in self.views.iter().filter(|v| v.charged) {
            self.fields.insert(
                v.name.clone(),
                Field {
                    window: v.window,
                    limit: v.limit,
                    at: now,
                    debt: v.debt,
                    prev: v.prev,
                    member: v.member.clone(),
                },
            );
            ttl = ttl.max(v.debt.div_ceil(v.limit));
        }
        (ttl > 0).then(|| expiry_after(now, ttl) + 1000)
    }

    fn is_empty(&self) -> bool {
        self.fields.is_empty() && self.answered.is_empty() && self.unanswered.is_empty()
    }
}

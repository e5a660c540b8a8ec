//! `concurrency`: attempts in flight per key, across every gateway. One sorted set per (route,
//! key) holds a lease per attempt admitted and not yet ended, scored by its expiry; the gateway
//! frees a lease when the attempt's answer has been sent (a refund), and a lease whose gateway
//! died expires on its own. `lua/concurrency.lua` is the script's piece; [`InflightState`] its
//! twin for the memory store.
//!
//! Differences from the window algorithms: no window (the limit's window field carries its
//! `lease`), one slot per attempt whatever the request's cost, a wait of 1 s (no one can
//! foresee when an answer ends), and a refusal that starts no block.

use super::seam::{expiry_after, Algorithm, KeyState, LimitParams, Settled};

/// Most attempts one key may have in flight: the set holds a member per attempt.
pub const MAX_LIMIT: u64 = 100_000;

/// A full key's wait, and the reset shown while slots are taken (µs).
const WAIT: i64 = 1_000_000;

/// Attempts in flight.
pub struct Concurrency;

impl Algorithm for Concurrency {
    fn name(&self) -> &'static str {
        "concurrency"
    }

    fn lua(&self) -> &'static str {
        include_str!("../../lua/concurrency.lua")
    }

    fn key_suffix(&self) -> &'static str {
        "#inflight"
    }

    fn shares_charges(&self) -> bool {
        true
    }

    fn check(&self, limit: u64, _window_us: u64, _burst: Option<u64>) -> Result<(), String> {
        if limit > MAX_LIMIT {
            return Err(format!(
                "a concurrency limit holds at most {MAX_LIMIT} attempts in flight per key (it keeps one lease per attempt)"
            ));
        }
        Ok(())
    }

    fn has_window(&self) -> bool {
        false
    }

    fn per_attempt(&self) -> bool {
        true
    }

    fn starts_blocks(&self) -> bool {
        false
    }

    fn fixed_wait_us(&self) -> Option<i64> {
        Some(WAIT)
    }

    fn policy_name(&self) -> Option<&'static str> {
        Some("inflight")
    }

    fn new_state(&self) -> Box<dyn KeyState> {
        Box::new(InflightState::default())
    }
}

/// One set of leases `(expiry µs, member)`, and the call's pending ones.
#[derive(Clone, Default)]
pub struct InflightState {
    leases: Vec<(u64, String)>,
    /// The longest lease of the limits sharing the set (`open`).
    lease: u64,
    /// Live leases at the call's instant.
    live: usize,
    pending: Vec<String>,
    charged: u64,
}

impl InflightState {
    fn used(&self) -> usize {
        self.live + self.pending.len()
    }
}

impl KeyState for InflightState {
    fn duplicate(&self) -> Box<dyn KeyState> {
        Box::new(self.clone())
    }

    fn open(&mut self, now: u64, window: u64, _bound: u64) {
        self.lease = window;
        self.pending.clear();
        self.charged = 0;
        self.live = self.leases.iter().filter(|(e, _)| *e > now).count();
    }

    fn view(&mut self, _limit: &LimitParams<'_>, _now: u64) -> usize {
        0
    }

    fn fits(&self, _view: usize, limit: u64, cost: u64) -> bool {
        (self.used() as u64) + cost.min(1) <= limit
    }

    fn wait(&self, _view: usize, _limit: u64, _cost: u64, _now: u64) -> i64 {
        WAIT
    }

    fn charge(&mut self, _view: usize, _cost: u64, member: &str, d: u64, _settle: u64) {
        if self.charged == d {
            return;
        }
        self.charged = d;
        self.pending.push(member.to_string());
    }

    fn report(&self, _view: usize, _now: u64) -> (i64, i64) {
        match self.used() {
            0 => (0, 0),
            used => (used as i64, WAIT),
        }
    }

    fn refund(&mut self, _limit: &LimitParams<'_>, member: &str, _at: u64, _cost: u64, _now: u64) {
        self.leases.retain(|(_, m)| m != member);
    }

    fn in_flight(&self, _: usize, _: &str, _: u64, _: u64, _: u64, _: u64) -> i64 {
        0
    }

    fn confirm(&mut self, _: &LimitParams<'_>, _: &str, _: u64, _: u64, _: &str, _: u64) {}

    fn settle(&mut self, _: &LimitParams<'_>, _: &Settled<'_>, _: u64) -> Option<u64> {
        None
    }

    fn clear(&mut self, _name: &str, _tag: &str, _now: u64) -> bool {
        self.is_empty()
    }

    fn finish(&mut self, now: u64) -> Option<u64> {
        if self.pending.is_empty() {
            return None;
        }
        self.leases.retain(|(e, _)| *e > now);
        let expiry = now + self.lease;
        for member in std::mem::take(&mut self.pending) {
            self.leases.push((expiry, member));
        }
        Some(expiry_after(now, self.lease))
    }

    fn is_empty(&self) -> bool {
        self.leases.is_empty() && self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> LimitParams<'static> {
        LimitParams {
            name: "inflight",
            limit: 2,
            window: 1_000_000,
            param: 0,
        }
    }

    #[test]
    fn slots_are_taken_freed_and_expire() {
        let mut s = InflightState::default();
        let call = |s: &mut InflightState, now: u64, member: &str, d: u64| {
            s.open(now, 1_000_000, 2);
            let v = s.view(&params(), now);
            let fits = s.fits(v, 2, 5);
            if fits {
                s.charge(v, 5, member, d, 0);
            }
            s.finish(now);
            fits
        };
        assert!(call(&mut s, 10, "a", 1));
        assert!(call(&mut s, 20, "b", 1));
        assert!(!call(&mut s, 30, "c", 1), "two in flight, limit 2");
        s.refund(&params(), "a", 10, 5, 40);
        assert!(call(&mut s, 50, "c", 1), "a's slot was freed");
        assert!(!call(&mut s, 60, "d", 1));
        // b's lease expires 1 s after it was taken
        assert!(call(&mut s, 1_000_021, "d", 1));
        s.open(1_000_022, 1_000_000, 2);
        assert_eq!(s.report(0, 1_000_022), (2, WAIT));
    }
}

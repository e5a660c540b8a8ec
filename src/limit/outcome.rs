//! Counting outcomes (`count_status`, `reset_status`). An admitted attempt is charged at once,
//! as a [`Reservation`], and settled once, by what is known of it:
//! - the status of its answer ([`Reservation::settle`]): limits whose `count_status` does not
//!   list it give their charge back; those whose `reset_status` lists it give it back and
//!   forgive the key's answered attempts and block level (reservations still in flight stay:
//!   a reset forgives answers, never what is still being decided); the others keep it;
//! - no status, though the upstream saw the attempt ([`Reservation::keep`]): kept;
//! - proof the upstream never saw it ([`Reservation::abandon`]): given back.
//!
//! **The invariant kept here: every admitted attempt is either counted or refunded, and a refund
//! needs a known status or proof that the upstream never saw the attempt.** A reservation
//! dropped without a settlement stays counted. So at most `limit` counted attempts ever fall in
//! one window, and attempts in flight count until they are answered.
//!
//! The settlement rides in the next store call of its keys' lane; the response's rate-limit
//! headers already show it ([`Settled::apply`]).

use std::sync::Arc;

use super::keys::RequestKeys;
use super::limiter::Limiter;
use super::policy::{OutcomeRule, RoutePolicy, Tier};
use super::verdict::Verdict;
use crate::store::{Decision, LimitSet, Receipt, Settlement};

/// An allowed attempt's charge, held until its answer says whether it counts.
pub struct Reservation {
    limiter: Arc<Limiter>,
    policy: Arc<RoutePolicy>,
    limits: Arc<LimitSet>,
    bases: Vec<String>,
    /// Per key slot, the tag of the value the attempt sent (where the slot merges values).
    tags: Vec<String>,
    receipt: Option<Receipt>,
}

/// What a settlement did, for the response's headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settled {
    /// Limits whose charge went back.
    pub refunded: Vec<usize>,
    /// Limits whose answered count was cleared (the attempt's own charge going back with it).
    pub reset: Vec<usize>,
    /// Limits whose charge stays, confirmed as answered (a status may reset them later).
    pub confirmed: Vec<usize>,
    /// Units of the charge.
    pub cost: u64,
}

/// What becomes of one limit's charge.
enum Fate {
    Refund,
    Keep,
    Reset,
}

impl Settled {
    /// Whether it leaves the store as it is (every charge kept, none to confirm).
    pub fn is_empty(&self) -> bool {
        self.refunded.is_empty() && self.reset.is_empty() && self.confirmed.is_empty()
    }

    /// Shows the settlement in the decision the headers describe: a refunded limit has the
    /// charge back, a reset one counts nothing.
    pub fn apply(&self, decision: &mut Decision) {
        for &i in &self.refunded {
            if let Some(u) = decision.limits.get_mut(i) {
                u.used = u.used.saturating_sub(self.cost);
                if u.used == 0 {
                    u.reset = std::time::Duration::ZERO;
                }
            }
        }
        for &i in &self.reset {
            if let Some(u) = decision.limits.get_mut(i) {
                u.used = 0;
                u.reset = std::time::Duration::ZERO;
            }
        }
    }
}

impl Reservation {
    /// The reservation of an allowed attempt on an outcome-counted route, if it charged.
    pub fn of(
        limiter: &Arc<Limiter>,
        policy: &Arc<RoutePolicy>,
        tier: &Tier,
        keys: &RequestKeys,
        verdict: &Verdict,
    ) -> Option<Reservation> {
        if !policy.counts_outcomes() || !verdict.forwards() {
            return None;
        }
        let receipt = verdict.decision.as_ref()?.receipt.clone()?;
        Some(Reservation {
            limiter: limiter.clone(),
            policy: policy.clone(),
            limits: tier.limits.clone(),
            bases: keys.bases.clone(),
            tags: keys.tags.clone(),
            receipt: Some(receipt),
        })
    }

    /// Settles the attempt by the status of its answer.
    pub fn settle(mut self, status: u16) -> Settled {
        let settled = self.settlement(|rule| {
            if rule.reset.as_ref().is_some_and(|r| r.contains(status)) {
                Fate::Reset
            } else if rule.count.as_ref().is_some_and(|c| !c.contains(status)) {
                Fate::Refund
            } else {
                Fate::Keep
            }
        });
        self.send(&settled);
        settled
    }

    /// The upstream saw the attempt but its status never came (it timed out, or failed after
    /// the request went out): it stays counted, as it may have been acted on.
    pub fn keep(mut self) {
        let settled = self.settlement(|_| Fate::Keep);
        self.send(&settled);
    }

    /// The attempt never reached the upstream (its client left before anything was forwarded):
    /// the limits that count only some statuses give the charge back; the others count every
    /// admitted attempt and keep it.
    pub fn abandon(mut self) {
        let settled = self.settlement(|rule| match rule.count {
            Some(_) => Fate::Refund,
            None => Fate::Keep,
        });
        self.send(&settled);
    }

    /// What happens to each outcome-counted limit's charge, by `fate`. A charge kept on a limit
    /// that a status may reset, or on a blocking route, is confirmed: the store learns the
    /// attempt is no longer in flight, so a later reset forgives it and a refusal it causes may
    /// start a block.
    fn settlement(&self, fate: impl Fn(&OutcomeRule) -> Fate) -> Settled {
        let mut settled = Settled {
            cost: self.receipt.as_ref().map_or(0, |r| r.cost),
            ..Settled::default()
        };
        for (i, rule) in self.policy.outcomes.iter().enumerate() {
            let Some(rule) = rule else { continue };
            match fate(rule) {
                Fate::Reset => settled.reset.push(i),
                Fate::Refund => settled.refunded.push(i),
                Fate::Keep if rule.confirms => settled.confirmed.push(i),
                Fate::Keep => {}
            }
        }
        settled
    }

    /// Counts the settlement and hands it to the store in the background.
    fn send(&mut self, settled: &Settled) {
        let Some(receipt) = self.receipt.take() else {
            return;
        };
        if settled.is_empty() {
            return;
        }
        let metrics = &self.policy.metrics;
        // A reset gives the attempt's own charge back too: a refund as well as a reset.
        for &i in settled.refunded.iter().chain(&settled.reset) {
            metrics.outcome_refunds[i].inc();
        }
        for &i in &settled.reset {
            metrics.outcome_resets[i].inc();
        }
        // A refund or a reset gives room back: the key is decided by the store again here at
        // once (which still holds any block); other instances' deny-cache entries lapse at
        // their own time.
        for &i in settled.refunded.iter().chain(&settled.reset) {
            let slot = self.limits.slot_of(i);
            self.limiter.deny_cache.remove(&self.bases[slot]);
        }
        let settlement = Settlement {
            limits: self.limits.clone(),
            bases: std::mem::take(&mut self.bases),
            receipt,
            refund: settled.refunded.clone(),
            confirm: settled.confirmed.clone(),
            reset: settled.reset.clone(),
            tags: std::mem::take(&mut self.tags),
        };
        // Queued (or applied) now, before the answer goes out: the next decision of this
        // connection sees it, as the answer's headers say.
        let applied = self.limiter.store.settle(settlement);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let route = self.policy.name().to_string();
        runtime.spawn(async move {
            if let Err(e) = applied.await {
                tracing::warn!(route, error = %e, "could not settle an outcome-counted attempt");
            }
        });
    }
}

/// A reservation dropped unsettled has no known status and no proof the upstream never saw its
/// attempt: it stays counted.
impl Drop for Reservation {
    fn drop(&mut self) {
        if self.receipt.is_some() {
            let settled = self.settlement(|_| Fate::Keep);
            self.send(&settled);
        }
    }
}

//! Counting outcomes (`count_status`, `reset_status`). An admitted attempt is charged at once,
//! as a [`Reservation`]; when its response head arrives, the limits whose `count_status` does
//! not list the status give their charge back, and those whose `reset_status` lists it forget
//! their count and their key's block level. An attempt whose answer never comes (the client
//! left first) gives back every reservation. So at most `limit` counted attempts ever fall in
//! one window, and attempts in flight count until they are answered.
//!
//! The settlement rides in the next store call of its keys' lane; the response's rate-limit
//! headers already show it ([`Settled::apply`]).

use std::sync::Arc;

use super::keys::RequestKeys;
use super::policy::{RoutePolicy, Tier};
use super::{Limiter, Verdict};
use crate::store::{Decision, LimitSet, Receipt, Settlement};

/// An allowed attempt's charge, held until its answer says whether it counts.
pub struct Reservation {
    limiter: Arc<Limiter>,
    policy: Arc<RoutePolicy>,
    limits: Arc<LimitSet>,
    bases: Vec<String>,
    receipt: Option<Receipt>,
}

/// What a settlement did, for the response's headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settled {
    /// Limits whose charge went back.
    pub refunded: Vec<usize>,
    /// Limits whose count was cleared.
    pub reset: Vec<usize>,
    /// Units of the charge.
    pub cost: u64,
}

impl Settled {
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
            receipt: Some(receipt),
        })
    }

    /// Settles the attempt by the status of its answer.
    pub fn settle(mut self, status: u16) -> Settled {
        let mut settled = Settled {
            cost: self.receipt.as_ref().map_or(0, |r| r.cost),
            ..Settled::default()
        };
        for (i, rule) in self.policy.outcomes.iter().enumerate() {
            let Some(rule) = rule else { continue };
            if rule.reset.as_ref().is_some_and(|r| r.contains(status)) {
                settled.reset.push(i);
            } else if rule.count.as_ref().is_some_and(|c| !c.contains(status)) {
                settled.refunded.push(i);
            }
        }
        self.send(&settled);
        settled
    }

    /// The answer is never seen (forward auth decides before the request is served): the
    /// charge stays, as an attempt whose status never arrives does.
    pub fn keep(mut self) {
        self.receipt = None;
    }

    /// The client left before its answer: every reservation goes back.
    pub fn abandon(mut self) {
        let settled = self.abandoned();
        self.send(&settled);
    }

    fn abandoned(&self) -> Settled {
        Settled {
            refunded: (0..self.policy.outcomes.len())
                .filter(|&i| {
                    self.policy.outcomes[i]
                        .as_ref()
                        .is_some_and(|r| r.count.is_some())
                })
                .collect(),
            reset: Vec::new(),
            cost: self.receipt.as_ref().map_or(0, |r| r.cost),
        }
    }

    /// Counts the settlement and hands it to the store in the background.
    fn send(&mut self, settled: &Settled) {
        let Some(receipt) = self.receipt.take() else {
            return;
        };
        if settled.refunded.is_empty() && settled.reset.is_empty() {
            return;
        }
        let metrics = &self.policy.metrics;
        for &i in &settled.refunded {
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
            reset: settled.reset.clone(),
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

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.receipt.is_some() {
            let settled = self.abandoned();
            self.send(&settled);
        }
    }
}

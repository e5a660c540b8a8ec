//! Settling what an admitted attempt charged, by what becomes known of its answer. The charge
//! is made at once, as a [`Reservation`], and settled by:
//! - the head of its answer ([`Reservation::settle`]): limits whose `count_status` does not list
//!   the status give their charge back; those whose `reset_status` lists it give it back and
//!   forgive the key's answered attempts and block level (reservations still in flight stay: a
//!   reset forgives answers, never what is still being decided); a limit whose cost a header
//!   states is charged that; the others keep it, and what only the answer's end settles (a slot
//!   in flight, a cost the body states) becomes its [`Ending`];
//! - no status, though the upstream saw the attempt ([`Reservation::keep`]): counts and costs
//!   kept, slots freed;
//! - proof the upstream never saw it ([`Reservation::abandon`]): outcome-counted charges, costs
//!   and slots given back; plain counts kept.
//!
//! **The invariant kept here: every admitted attempt is either counted or refunded, and a refund
//! needs a known status or proof that the upstream never saw the attempt.** A reservation
//! dropped without a settlement stays counted (its slots freed: nothing holds it any more). So
//! at most `limit` counted attempts ever fall in one window, and attempts in flight count until
//! they are answered.
//!
//! A settlement rides in the next store call of its keys' lane; the response's rate-limit
//! headers already show what the head settled ([`Settled::apply`]).

use std::sync::Arc;

use http::HeaderMap;

use super::ending::Ending;
use super::keys::RequestKeys;
use super::limiter::Limiter;
use super::policy::{AtEnd, OutcomeRule, RoutePolicy, Tier};
use super::verdict::Verdict;
use crate::cost::{from_header, CostReader};
use crate::store::{Decision, LimitSet, Receipt, Settlement};

/// An allowed attempt's charge, held until its answer says what it comes to.
pub struct Reservation {
    charged: Option<Charged>,
}

/// What an admitted attempt charged, and where to settle it.
pub(super) struct Charged {
    pub limiter: Arc<Limiter>,
    pub policy: Arc<RoutePolicy>,
    pub limits: Arc<LimitSet>,
    pub bases: Vec<String>,
    pub receipt: Receipt,
}

/// What a settlement did, for the response's headers and the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settled {
    /// Limits whose charge went back.
    pub refunded: Vec<usize>,
    /// Limits whose answered count was cleared (the attempt's own charge going back with it).
    pub reset: Vec<usize>,
    /// Limits whose charge stays, confirmed as answered (a status may reset them later).
    pub confirmed: Vec<usize>,
    /// Limits whose slot in flight was freed.
    pub released: Vec<usize>,
    /// Limits whose charge became what the answer stated (at most the limit).
    pub settled_to: Vec<(usize, u64)>,
    /// Limits with `cost_from` whose answer stated no cost: the reservation stands.
    pub kept_costs: Vec<usize>,
    /// Units the charge took of each limit.
    pub units: Vec<u64>,
}

/// What becomes of one limit's charge.
enum Fate {
    Refund,
    Keep,
    Reset,
    /// The slot in flight is freed.
    Release,
    /// Charged what the answer stated.
    To(u64),
    /// Settled at the answer's end (a slot, or a cost its body states).
    AtEnd,
}

impl Settled {
    /// Whether it leaves the store as it is.
    pub fn is_empty(&self) -> bool {
        self.refunded.is_empty()
            && self.reset.is_empty()
            && self.confirmed.is_empty()
            && self.released.is_empty()
            && self.settled_to.is_empty()
    }

    /// Shows the settlement in the decision the headers describe: a refunded limit has the
    /// charge back, a reset one counts nothing, a settled one counts what the answer stated.
    pub fn apply(&self, decision: &mut Decision) {
        let units = |i: usize| self.units.get(i).copied().unwrap_or(0);
        let back = |decision: &mut Decision, i: usize, less: u64, more: u64| {
            if let Some(u) = decision.limits.get_mut(i) {
                u.used = (u.used + more).saturating_sub(less);
                if u.used == 0 {
                    u.reset = std::time::Duration::ZERO;
                }
            }
        };
        for &i in self.refunded.iter().chain(&self.released) {
            back(decision, i, units(i), 0);
        }
        for &(i, to) in &self.settled_to {
            back(decision, i, units(i), to);
        }
        for &i in &self.reset {
            back(decision, i, u64::MAX, 0);
        }
    }
}

impl Reservation {
    /// The reservation of an allowed attempt on a route whose answers settle charges, if it
    /// charged.
    pub fn of(
        limiter: &Arc<Limiter>,
        policy: &Arc<RoutePolicy>,
        tier: &Tier,
        keys: &RequestKeys,
        verdict: &Verdict,
    ) -> Option<Reservation> {
        if !policy.settles() || !verdict.forwards() {
            return None;
        }
        let receipt = verdict.decision.as_ref()?.receipt.clone()?;
        Some(Reservation {
            charged: Some(Charged {
                limiter: limiter.clone(),
                policy: policy.clone(),
                limits: tier.limits.clone(),
                bases: keys.bases.clone(),
                receipt,
            }),
        })
    }

    /// Settles the attempt by the head of its answer (its status and headers); what only the
    /// answer's end can settle comes back as its [`Ending`].
    pub fn settle(mut self, status: u16, headers: &HeaderMap) -> (Settled, Option<Ending>) {
        let Some(charged) = self.charged.take() else {
            return (Settled::default(), None);
        };
        let settled = charged.settlement(|rule| {
            if rule.reset.as_ref().is_some_and(|r| r.contains(status)) {
                return Fate::Reset;
            }
            if rule.count.as_ref().is_some_and(|c| !c.contains(status)) {
                return Fate::Refund;
            }
            match &rule.at_end {
                Some(AtEnd::Cost(from)) if !from.reads_body() => {
                    from_header(from, headers).map_or(Fate::Keep, Fate::To)
                }
                Some(_) => Fate::AtEnd,
                None => Fate::Keep,
            }
        });
        charged.send(&settled);
        let readers = charged
            .policy
            .outcomes
            .iter()
            .enumerate()
            .filter_map(|(i, rule)| {
                let Some(AtEnd::Cost(from)) = rule.as_ref()?.at_end.as_ref() else {
                    return None;
                };
                let deferred = !settled.refunded.contains(&i) && !settled.reset.contains(&i);
                let max = charged.policy.config.max_cost_body_bytes;
                Some((i, CostReader::new(from, headers, max)?)).filter(|_| deferred)
            });
        let readers: Vec<(usize, CostReader)> = readers.collect();
        (settled, Ending::new(charged, readers))
    }

    /// The upstream saw the attempt but its status never came (it timed out, or failed after
    /// the request went out): counts and costs stay, as it may have been acted on; its slots
    /// are free.
    pub fn keep(mut self) {
        if let Some(charged) = self.charged.take() {
            charged.send(&charged.settlement(kept));
        }
    }

    /// The attempt never reached the upstream (its client left before anything was forwarded):
    /// the limits that count only some statuses, that charge what the answer states, or that
    /// hold a slot give the charge back; the others count every admitted attempt and keep it.
    pub fn abandon(mut self) {
        let Some(charged) = self.charged.take() else {
            return;
        };
        charged.send(
            &charged.settlement(|rule| match (&rule.count, &rule.at_end) {
                (_, Some(AtEnd::Slot)) => Fate::Release,
                (Some(_), _) | (_, Some(AtEnd::Cost(_))) => Fate::Refund,
                (None, None) => Fate::Keep,
            }),
        );
    }
}

/// What no known answer leaves: counts and costs kept, slots freed.
fn kept(rule: &OutcomeRule) -> Fate {
    match rule.at_end {
        Some(AtEnd::Slot) => Fate::Release,
        _ => Fate::Keep,
    }
}

impl Charged {
    /// What happens to each limit's charge, by `fate`. A charge kept on a limit that a status
    /// may reset is confirmed: the store learns the attempt is no longer in flight, so a later
    /// reset forgives it.
    fn settlement(&self, fate: impl Fn(&OutcomeRule) -> Fate) -> Settled {
        let cost = self.receipt.cost;
        let mut settled = Settled {
            units: self.limits.limits.iter().map(|l| l.cost_of(cost)).collect(),
            ..Settled::default()
        };
        for (i, rule) in self.policy.outcomes.iter().enumerate() {
            let Some(rule) = rule else { continue };
            let limit = self.limits.limits.get(i).map_or(0, |l| l.limit);
            match fate(rule) {
                Fate::Reset => settled.reset.push(i),
                Fate::Refund => settled.refunded.push(i),
                Fate::Release => settled.released.push(i),
                Fate::To(amount) => settled.settled_to.push((i, amount.min(limit))),
                Fate::Keep if matches!(rule.at_end, Some(AtEnd::Cost(_))) => {
                    settled.kept_costs.push(i)
                }
                Fate::Keep if rule.reset.is_some() => settled.confirmed.push(i),
                Fate::Keep | Fate::AtEnd => {}
            }
        }
        settled
    }

    /// Counts the settlement and hands it to the store in the background.
    pub(super) fn send(&self, settled: &Settled) {
        let metrics = &self.policy.metrics;
        // A reset gives the attempt's own charge back too: a refund as well as a reset.
        for &i in settled.refunded.iter().chain(&settled.reset) {
            metrics.outcome_refunds[i].inc();
        }
        for &i in &settled.reset {
            metrics.outcome_resets[i].inc();
        }
        for &(i, amount) in &settled.settled_to {
            metrics.cost_settled[i].inc_by(amount);
            metrics.cost_overage[i].inc_by(amount.saturating_sub(settled.units[i]));
        }
        for &i in &settled.kept_costs {
            metrics.cost_settled[i].inc_by(settled.units[i]);
        }
        if settled.is_empty() {
            return;
        }
        // Room given back: the key is decided by the store again here at once (which still
        // holds any block); other instances' deny-cache entries lapse at their own time.
        let lower = settled
            .settled_to
            .iter()
            .filter(|(i, to)| *to < settled.units[*i]);
        let freed = (settled.refunded.iter().chain(&settled.reset))
            .chain(&settled.released)
            .chain(lower.map(|(i, _)| i));
        for &i in freed {
            let slot = self.limits.slot_of(i);
            self.limiter.deny_cache.remove(&self.bases[slot]);
        }
        let store = &self.limiter.store;
        let settlement = Settlement {
            limits: self.limits.clone(),
            bases: self.bases.clone(),
            receipt: self.receipt.clone(),
            refund: [settled.refunded.as_slice(), &settled.released].concat(),
            confirm: settled.confirmed.clone(),
            reset: settled.reset.clone(),
            settle_to: settled.settled_to.clone(),
            at_us: store.settlement_instant(),
        };
        // Queued (or applied) now, before the answer goes on: the next decision of this
        // connection sees it, as the answer's headers say.
        let applied = store.settle(settlement);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let route = self.policy.name().to_string();
        runtime.spawn(async move {
            if let Err(e) = applied.await {
                tracing::warn!(route, error = %e, "could not settle an attempt's charge");
            }
        });
    }

    /// What the end of the answer settles: the slots freed, and each cost the body stated (the
    /// reservation kept when it stated none).
    pub(super) fn at_end(&self, release: bool, stated: &[(usize, Option<u64>)]) -> Settled {
        let mut settled = self.settlement(|_| Fate::AtEnd);
        if release {
            settled.released = (self.policy.outcomes.iter().enumerate())
                .filter(|(_, r)| {
                    matches!(
                        r,
                        Some(OutcomeRule {
                            at_end: Some(AtEnd::Slot),
                            ..
                        })
                    )
                })
                .map(|(i, _)| i)
                .collect();
        }
        for &(i, cost) in stated {
            let limit = self.limits.limits.get(i).map_or(0, |l| l.limit);
            match cost {
                Some(amount) => settled.settled_to.push((i, amount.min(limit))),
                None => settled.kept_costs.push(i),
            }
        }
        settled
    }
}

/// A reservation dropped unsettled has no known status and no proof the upstream never saw its
/// attempt: it stays counted; nothing holds its slots any more.
impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(charged) = self.charged.take() {
            charged.send(&charged.settlement(kept));
        }
    }
}

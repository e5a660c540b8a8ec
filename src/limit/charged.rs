//! What an admitted attempt charged ([`Charged`]: the limits, keys and receipt of its decision)
//! and how a settlement of it is made and sent: which limits give their charge back, keep it,
//! are reset, freed or charged what the answer stated ([`Settled`]), counted in the metrics and
//! handed to the store. Below both the head's settlement (`outcome.rs`) and the end's
//! (`ending.rs`), which each decide what becomes of the charge.

use std::sync::Arc;

use super::limiter::Limiter;
use super::outcome_rule::{AtEnd, OutcomeRule};
use super::policy::RoutePolicy;
use crate::store::{Decision, DecisionRequest, LimitSet, Receipt, Settlement, Store};

/// What an admitted attempt charged, and where to settle it.
pub(super) struct Charged {
    pub limiter: Arc<Limiter>,
    pub policy: Arc<RoutePolicy>,
    pub limits: Arc<LimitSet>,
    pub bases: Vec<String>,
    /// Per key slot, the tag of the value the attempt sent (where the slot merges values).
    pub tags: Vec<String>,
    pub receipt: Receipt,
    /// Whether the in-process fallback decided it (the store had failed): it settles there,
    /// where its charge is.
    pub local: bool,
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
    /// Limits whose charge stays though no answer came: the store tallies it apart from the
    /// answered ones, so a refusal that stands on such attempts tells the window's wait.
    pub unanswered: Vec<usize>,
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
pub(super) enum Fate {
    Refund,
    /// Kept: the answer counts.
    Keep,
    /// Kept, though no answer came (its status never arrived): it counts, but is never
    /// confirmed as answered, so it starts no block and no reset forgives it.
    Unanswered,
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
            && self.unanswered.is_empty()
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

impl Settled {
    /// A cost limit's charge settled: to what the answer stated, or kept as reserved when it
    /// stated none; either way answered, so where the rule confirms, the store learns the
    /// charge is no longer in flight (its refusals may start a block at once).
    fn cost(&mut self, rule: &OutcomeRule, i: usize, stated: Option<u64>) {
        match stated {
            Some(amount) => self.settled_to.push((i, amount)),
            None => self.kept_costs.push(i),
        }
        if rule.confirms {
            self.confirmed.push(i);
        }
    }

    /// A cost limit's charge kept without an answer: the reservation stands, unconfirmed.
    fn unanswered_cost(&mut self, i: usize) {
        self.kept_costs.push(i);
    }
}

impl Charged {
    /// What happens to each limit's charge, by `fate`. A charge kept on a limit that counts
    /// outcomes, or on a blocking route, is confirmed: the store learns the attempt is no
    /// longer in flight, so it counts where it was charged, a later reset forgives it and a
    /// refusal it causes may start a block.
    pub(super) fn settlement(&self, fate: impl Fn(&OutcomeRule) -> Fate) -> Settled {
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
                Fate::To(amount) => settled.cost(rule, i, Some(amount.min(limit))),
                Fate::Keep if matches!(rule.at_end, Some(AtEnd::Cost(_))) => {
                    settled.cost(rule, i, None)
                }
                Fate::Unanswered if matches!(rule.at_end, Some(AtEnd::Cost(_))) => {
                    settled.unanswered_cost(i)
                }
                Fate::Keep if rule.confirms => settled.confirmed.push(i),
                Fate::Unanswered if rule.confirms => settled.unanswered.push(i),
                Fate::Keep | Fate::Unanswered | Fate::AtEnd => {}
            }
        }
        settled
    }

    /// The count of the charge's limits in the store that holds it, read (cost 0, uncounted)
    /// once polled: after a settlement handed over before, which rides ahead of the read on
    /// the keys' lane (the fallback applies it at once). `None` when the store cannot tell.
    pub(super) fn recount(&self) -> impl std::future::Future<Output = Option<Decision>> + 'static {
        let limiter = self.limiter.clone();
        let (limits, bases, local) = (self.limits.clone(), self.bases.clone(), self.local);
        async move {
            let request = DecisionRequest {
                limits: &limits,
                bases: &bases,
                cost: 0,
                dry_run: false,
                receipt: false,
            };
            let read = match local {
                true => {
                    Store::Memory(limiter.fallback.clone())
                        .decide(request)
                        .await
                }
                false => limiter.store().decide(request).await,
            };
            read.ok()
        }
    }

    /// Counts the settlement and hands it to the store in the background; the charge stays
    /// for a later settlement (slots freed before the answer's end).
    pub(super) fn send(&self, settled: &Settled) {
        if self.count(settled) {
            let parts = (self.bases.clone(), self.tags.clone(), self.receipt.clone());
            let settlement = settlement(self.limits.clone(), parts, settled.clone());
            self.limiter.settle(self.local, settlement);
        }
    }

    /// [`Charged::send`] for the charge's last settlement: its keys and receipt move into it.
    pub(super) fn send_last(self, settled: Settled) {
        if self.count(&settled) {
            let Charged {
                limiter,
                limits,
                bases,
                tags,
                receipt,
                local,
                ..
            } = self;
            limiter.settle(local, settlement(limits, (bases, tags, receipt), settled));
        }
    }

    /// Counts the settlement in the metrics and, where it gives room back, drops the deny-cache
    /// entries of its keys (where it confirms an answered attempt, those of refusals that stood
    /// on attempts in flight); whether the store has anything to apply.
    fn count(&self, settled: &Settled) -> bool {
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
            return false;
        }
        // Room given back: refunds, resets, slots released and costs settled below the charge.
        let lower = settled
            .settled_to
            .iter()
            .filter(|(i, to)| *to < settled.units[*i]);
        let freed = (settled.refunded.iter().chain(&settled.reset))
            .chain(&settled.released)
            .chain(lower.map(|(i, _)| i))
            .copied();
        self.limiter
            .room_given_back(&self.limits, &self.bases, freed);
        // More charged than reserved: a refusal cached before it tells too short a wait now.
        let overage = settled
            .settled_to
            .iter()
            .filter(|(i, to)| *to > settled.units[*i]);
        for (i, _) in overage {
            let slot = self.limits.slot_of(*i);
            self.limiter.deny_cache.remove(&self.bases[slot]);
        }
        // An attempt answered: a refusal the cache keeps only for attempts in flight may now be
        // a block, which the store starts at the key's next attempt; one kept without an
        // answer may now tell the window's wait. Only limits whose reservations stay in flight
        // (those that count outcomes) have such refusals: the others' settlements touch no cache.
        let in_flight = |i: &&usize| self.limits.limits[**i].settle_us > 0;
        let settled_out = settled.confirmed.iter().chain(&settled.unanswered);
        for &i in settled_out.filter(in_flight) {
            let slot = self.limits.slot_of(i);
            self.limiter.deny_cache.remove_in_flight(&self.bases[slot]);
        }
        true
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
            if let Some(rule) = self.policy.outcomes.get(i).and_then(Option::as_ref) {
                settled.cost(rule, i, cost.map(|amount| amount.min(limit)));
            }
        }
        settled
    }
}

/// The store's settlement of `settled`, for the limits, keys (bases, tags) and receipt of a
/// charge. Queued (or applied) as soon as it is handed over, before the answer goes on: the
/// next decision of the connection sees it, as the answer's headers say.
fn settlement(
    limits: Arc<LimitSet>,
    (bases, tags, receipt): (Vec<String>, Vec<String>, Receipt),
    settled: Settled,
) -> Settlement {
    let mut refund = settled.refunded;
    refund.extend(settled.released);
    Settlement {
        limits,
        bases,
        receipt,
        refund,
        confirm: settled.confirmed,
        unanswered: settled.unanswered,
        reset: settled.reset,
        settle_to: settled.settled_to,
        at_us: None,
        tags,
    }
}

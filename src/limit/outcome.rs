//! Settling what an admitted attempt charged, by what becomes known of its answer. The charge
//! is made at once, as a [`Reservation`], and settled by:
//! - the head of its answer ([`Reservation::settle`]): limits whose `count_status` does not list
//!   the status give their charge back; those whose `reset_status` lists it give it back and
//!   forgive the key's answered attempts and block level (reservations still in flight stay: a
//!   reset forgives answers, never what is still being decided); a limit whose cost a header
//!   states is charged that; the others keep it, and what only the answer's end settles (a slot
//!   in flight, a cost the body states) becomes its [`Ending`];
//! - no status, though the upstream saw the attempt ([`Reservation::keep`]): counts and costs
//!   kept but not confirmed as answered (it starts no block; no reset forgives it), slots freed;
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

use super::charged::{Charged, Fate, Settled};
use super::ending::Ending;
use super::keys::RequestKeys;
use super::limiter::Limiter;
use super::outcome_rule::{AtEnd, OutcomeRule};
use super::policy::RoutePolicy;
use super::tier::Tier;
use super::verdict::Verdict;
use crate::cost::{from_header, CostReader};
use crate::store::Decision;

/// The store's count of an attempt's limits after a settlement; `None` when it cannot tell.
pub type Recount = std::pin::Pin<Box<dyn std::future::Future<Output = Option<Decision>> + Send>>;

/// An allowed attempt's charge, held until its answer says what it comes to.
pub struct Reservation {
    charged: Option<Charged>,
}

impl Reservation {
    /// The reservation of an allowed attempt on a route whose answers settle charges, if it
    /// charged. It takes the verdict's receipt (the verdict needs it no more).
    pub fn of(
        limiter: &Arc<Limiter>,
        policy: &Arc<RoutePolicy>,
        tier: &Tier,
        keys: &RequestKeys,
        verdict: &mut Verdict,
    ) -> Option<Reservation> {
        if !policy.settles() || !verdict.forwards() {
            return None;
        }
        let receipt = verdict.decision.as_mut()?.receipt.take()?;
        Some(Reservation {
            charged: Some(Charged {
                limiter: limiter.clone(),
                policy: policy.clone(),
                limits: tier.limits.clone(),
                bases: keys.bases.clone(),
                tags: keys.tags.clone(),
                receipt,
                local: verdict.local,
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
            if rule.resets_on(status) {
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
        if !Ending::awaited(&charged, &readers) {
            // nothing waits for the answer's end: this is the charge's last settlement
            charged.send_last(settled.clone());
            return (settled, None);
        }
        charged.send(&settled);
        (settled, Ending::new(charged, readers))
    }

    /// Where an answer with `status` resets a limit, the store's count of the attempt's limits
    /// once that reset is applied, to be awaited after [`Reservation::settle`] (a reset forgives
    /// only answers, and only the value sent, so the count it leaves is the store's to tell).
    pub fn recount_on(&self, status: u16) -> Option<Recount> {
        let charged = self.charged.as_ref()?;
        let resets = charged
            .policy
            .outcomes
            .iter()
            .flatten()
            .any(|r| r.resets_on(status));
        resets.then(|| Box::pin(charged.recount()) as Recount)
    }

    /// The upstream saw the attempt but its status never came (it timed out, or failed after
    /// the request went out): counts and costs stay, as it may have been acted on, but as no
    /// answer (a block starts only from answered attempts); its slots are free.
    pub fn keep(mut self) {
        if let Some(charged) = self.charged.take() {
            let settled = charged.settlement(kept);
            charged.send_last(settled);
        }
    }

    /// The attempt never reached the upstream (its client left before anything was forwarded):
    /// the limits that count only some statuses, that charge what the answer states, or that
    /// hold a slot give the charge back; the others count every admitted attempt and keep it.
    pub fn abandon(mut self) {
        let Some(charged) = self.charged.take() else {
            return;
        };
        let settled = charged.settlement(|rule| match (&rule.count, &rule.at_end) {
            (_, Some(AtEnd::Slot)) => Fate::Release,
            (Some(_), _) | (_, Some(AtEnd::Cost(_))) => Fate::Refund,
            (None, None) => Fate::Keep,
        });
        charged.send_last(settled);
    }
}

/// What no known answer leaves: counts and costs kept, unanswered; slots freed.
fn kept(rule: &OutcomeRule) -> Fate {
    match rule.at_end {
        Some(AtEnd::Slot) => Fate::Release,
        _ => Fate::Unanswered,
    }
}

/// A reservation dropped unsettled has no known status and no proof the upstream never saw its
/// attempt: it stays counted; nothing holds its slots any more.
impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(charged) = self.charged.take() {
            let settled = charged.settlement(kept);
            charged.send_last(settled);
        }
    }
}

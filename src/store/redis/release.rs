//! Slots in flight that a failed call may leave behind, and the releases that free them. A
//! decision call that times out may still run once its node answers again (it sits in the
//! connection, or in the node's queue): a concurrency lease taken then would hold its key's
//! slot for the whole `lease`, though the attempt was long answered by `on_error` and is over.
//! So a call that timed out keeps, to send again, a release of each slot its decisions may
//! have taken, and any failed call the settlements it carried that only free slots (an attempt
//! that ended during the fault); so do allowed decisions whose charge the replicas did not
//! acknowledge (`store.replica_acks`: answered by `on_error`, their charge stays on the master). The lane sends them with its next calls, after a pause, until
//! one is applied or the lease it frees would have expired anyway (at most [`MAX_KEPT`] at
//! once; the rest are left to their leases). Freeing a lease twice, or one never taken (the
//! decision was refused, or never ran), frees nothing: a release is safe to repeat.

use std::time::Duration;

use super::batch::{Batch, Pending, PendingSettlement};
use super::deadline::Deadline;
use super::encode::decision_member;
use crate::store::{LimitSet, StoreError};

/// How long a kept release waits before it is sent again: a node that refuses connections
/// costs its lane one call per pause, not a loop.
pub const RETRY_AFTER: Duration = Duration::from_millis(100);
/// The most releases a lane keeps at once: a long stall under load times out a call per
/// request, and what is over this is left to the leases' own expiry.
pub const MAX_KEPT: usize = 10_000;

/// Fails everything in `batch` with `error` (sent under `token`), and returns the releases to
/// send again: one per decision that may have taken a slot, and each settlement that only
/// frees slots (whoever waits for it is told the error now).
pub fn fail_keeping_releases(
    mut batch: Batch,
    error: StoreError,
    token: &str,
) -> Vec<PendingSettlement> {
    let mut kept = Vec::new();
    // A call that timed out may still run; one that failed on its connection did not reach a
    // server that kept it (a dead one's leases are gone with it).
    if !batch.dry && matches!(error, StoreError::Timeout(_)) {
        let decisions = batch.decisions.iter().enumerate();
        kept.extend(decisions.filter_map(|(d, p)| of_decision(p, token, d)));
    }
    for s in std::mem::take(&mut batch.settlements) {
        match frees_slots_only(&s) {
            true => {
                let again = release(
                    &s.limits,
                    s.keys.clone(),
                    s.member.clone(),
                    s.refund.clone(),
                    s.cost,
                );
                s.tell(Err(error.clone()));
                kept.push(again);
            }
            false => s.tell(Err(error.clone())),
        }
    }
    batch.fail(error);
    kept
}

/// The release of the slots decision `d` (from 0) of the call sent under `token` took, when it
/// charged any: for a call that timed out, or an allowed decision whose charge the replicas did
/// not acknowledge (it was answered by `on_error`, and is over when that answer is).
pub fn of_decision(p: &Pending, token: &str, d: usize) -> Option<PendingSettlement> {
    let slots = slot_limits(&p.limits);
    (p.cost > 0 && !slots.is_empty()).then(|| {
        let member = decision_member(token, d + 1);
        release(&p.limits, p.keys.clone(), member, slots, p.cost)
    })
}

/// The limits of `limits` that count slots in flight (no window).
fn slot_limits(limits: &LimitSet) -> Vec<usize> {
    (0..limits.limits.len())
        .filter(|&i| !is_window(limits, i))
        .collect()
}

fn is_window(limits: &LimitSet, i: usize) -> bool {
    let state = limits.limits[i].state;
    limits.states[state].algorithm.get().has_window()
}

/// Whether a settlement does nothing but free slots.
fn frees_slots_only(s: &PendingSettlement) -> bool {
    !s.refund.is_empty()
        && s.confirm.is_empty()
        && s.unanswered.is_empty()
        && s.reset.is_empty()
        && s.settle_to.is_empty()
        && s.refund.iter().all(|&i| !is_window(&s.limits, i))
}

/// A release of `slots` of the decision `member` names, kept until the longest of their
/// leases would have ended.
fn release(
    limits: &std::sync::Arc<LimitSet>,
    keys: Vec<fred::types::Key>,
    member: String,
    slots: Vec<usize>,
    cost: u64,
) -> PendingSettlement {
    let lease_us = (slots.iter()).map(|&i| limits.limits[i].window_us).max();
    PendingSettlement {
        limits: limits.clone(),
        keys,
        member,
        at: 0,
        cost,
        refund: slots,
        confirm: Vec::new(),
        unanswered: Vec::new(),
        reset: Vec::new(),
        settle_to: Vec::new(),
        at_us: None,
        tags: vec![String::new(); limits.limits.len()],
        deadline: Deadline::after(Duration::from_micros(lease_us.unwrap_or(0))),
        done: None,
    }
}

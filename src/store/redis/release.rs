//! Charges that a call answered by `on_error` may leave behind, and the releases that take
//! them back. A decision call that times out may still run once its node answers again (it sits
//! in the connection, or in the node's queue), long after its attempt was answered by
//! `on_error` and ended: a concurrency lease taken then would hold its key's slot for the whole
//! `lease`, and a reservation of a limit that counts outcomes (`count_status`) would wait for a
//! status no answer will ever bring, counted as an attempt without one for its whole window
//! (five successful logins during a stall would lock their account out). So a call that timed
//! out keeps, to send again, a release of each such charge its decisions may have made, and any
//! failed call the settlements it carried that only free slots (an attempt that ended during
//! the fault); so do allowed decisions whose charge the replicas did not acknowledge
//! (`store.replica_acks`: answered by `on_error`, their charge stays on the master). The lane
//! sends them with its next calls, after a pause, until one is applied or the charge it takes
//! back would have left its window anyway (at most [`MAX_KEPT`] at once; the rest are left to
//! their windows). A release takes back only a charge it finds (a slot's lease, a log's
//! entries, a `gcra` key's latest charge; a `sliding_window_counter`, which keeps no trace of
//! one charge, keeps it: the strict side), so it is safe to repeat, and safe for a call that
//! never ran.

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
/// send again: one per decision that may have charged what [`of_decision`] releases, and each
/// settlement that only frees slots or releases (whoever waits for it is told the error now).
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
        match sent_again(&s) {
            // no one waits for it: its failure is logged once, when it is given up (the lane
            // drops it once its deadline passed), not at every try while the store is down
            Some(again) if s.done.is_none() => kept.push(again),
            again => {
                s.tell(Err(error.clone()));
                kept.extend(again);
            }
        }
    }
    batch.fail(error);
    kept
}

/// What of a failed settlement is sent again: a release as it was, keeping its first deadline
/// (its charge leaves the window then), and a settlement that only frees slots as a release of
/// them, kept until their leases would have ended; nothing of others.
fn sent_again(s: &PendingSettlement) -> Option<PendingSettlement> {
    let (limits, deadline) = if is_release(s) {
        (&s.release, Some(s.deadline))
    } else if frees_slots_only(s) {
        (&s.refund, None)
    } else {
        return None;
    };
    let again = release(
        &s.limits,
        s.keys.clone(),
        s.member.clone(),
        limits.clone(),
        s.cost,
    );
    Some(PendingSettlement {
        deadline: deadline.unwrap_or(again.deadline),
        ..again
    })
}

/// The release of what decision `d` (from 0) of the call sent under `token` charged that only
/// its answer would settle, when it charged any: its slots in flight and its reservations of
/// limits that count outcomes. For a call that timed out, or an allowed decision whose charge
/// the replicas did not acknowledge (it was answered by `on_error`, and is over when that
/// answer is).
pub fn of_decision(p: &Pending, token: &str, d: usize) -> Option<PendingSettlement> {
    let held = held_for_answer(&p.limits);
    (p.cost > 0 && !held.is_empty()).then(|| {
        let member = decision_member(token, d + 1);
        release(&p.limits, p.keys.clone(), member, held, p.cost)
    })
}

/// The limits of `limits` whose charge waits for its attempt's answer: slots in flight (no
/// window) and limits that count outcomes.
fn held_for_answer(limits: &LimitSet) -> Vec<usize> {
    (0..limits.limits.len())
        .filter(|&i| !is_window(limits, i) || limits.limits[i].counts_outcomes)
        .collect()
}

fn is_window(limits: &LimitSet, i: usize) -> bool {
    let state = limits.limits[i].state;
    limits.states[state].algorithm.get().has_window()
}

/// Whether a settlement does nothing but free slots.
fn frees_slots_only(s: &PendingSettlement) -> bool {
    takes_back_only(s)
        && s.release.is_empty()
        && !s.refund.is_empty()
        && s.refund.iter().all(|&i| !is_window(&s.limits, i))
}

/// Whether a settlement is a release (nothing else).
fn is_release(s: &PendingSettlement) -> bool {
    takes_back_only(s) && s.refund.is_empty() && !s.release.is_empty()
}

/// Whether a settlement only takes charges back (refunds, releases): it confirms, keeps,
/// resets and settles nothing.
fn takes_back_only(s: &PendingSettlement) -> bool {
    s.confirm.is_empty() && s.unanswered.is_empty() && s.reset.is_empty() && s.settle_to.is_empty()
}

/// A release of the charges of `cost` units of `limits` whose first unit is `member`, kept until the longest of those limits' windows (a slot's: its lease) would have
/// let the charge go.
fn release(
    set: &std::sync::Arc<LimitSet>,
    keys: Vec<fred::types::Key>,
    member: String,
    limits: Vec<usize>,
    cost: u64,
) -> PendingSettlement {
    let longest_us = (limits.iter()).map(|&i| set.limits[i].window_us).max();
    PendingSettlement {
        limits: set.clone(),
        keys,
        member,
        at: 0,
        cost,
        refund: Vec::new(),
        release: limits,
        confirm: Vec::new(),
        unanswered: Vec::new(),
        reset: Vec::new(),
        settle_to: Vec::new(),
        at_us: None,
        tags: vec![String::new(); set.limits.len()],
        deadline: Deadline::after(Duration::from_micros(longest_us.unwrap_or(0))),
        done: None,
    }
}

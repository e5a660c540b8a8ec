//! A cluster request whose keys live in several slots (a limit with a key of its own: per phone
//! AND per IP) cannot be one script call: its keys may sit on several nodes. It is decided one
//! part per slot, all parts at once, and the answers are joined: allowed only when every part
//! allowed. When a part refuses (or fails), the parts that charged are taken back, so a
//! rejected request is charged nowhere; each limit stays exact for its own key, since every
//! charge it holds was decided by its own script call.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::answer::RedisAnswer;
use crate::store::{
    Decision, DecisionRequest, LimitSet, LimitUsage, Outcome, Receipt, ReceiptPart, Settlement,
    StoreError,
};

/// One part's decision, with where its limits sit in the whole set.
struct Part {
    slot: usize,
    set: Arc<LimitSet>,
    bases: Vec<String>,
    indexes: Vec<usize>,
    result: Result<Decision, StoreError>,
}

/// What deciding a request one part per slot needs of the store: each part decided (its keys
/// all in one slot), and a part's charge taken back.
pub(super) trait SlotStore: Send + Sync + 'static {
    /// Decides one part.
    fn submit_part(&self, request: DecisionRequest<'_>, now_us: Option<u64>) -> RedisAnswer;
    /// Queues a settlement of a part's charge (a failure is logged where it is applied).
    fn settle_part(&self, settlement: Settlement);
}

/// Decides `request` one part per key slot and joins the answers.
pub(super) fn decide<S: SlotStore>(
    store: S,
    request: DecisionRequest<'_>,
    now_us: Option<u64>,
) -> Pin<Box<dyn Future<Output = Result<Decision, StoreError>> + Send>> {
    let set = request.limits.clone();
    let bases = request.bases.to_vec();
    let (cost, dry_run, wants_receipt) = (request.cost, request.dry_run, request.receipt);
    let commits = cost > 0 && !dry_run;
    Box::pin(async move {
        let mut asked = Vec::new();
        for slot in set.used_slots() {
            let (part, indexes) = set.part(slot);
            let part_bases = vec![bases[slot].clone()];
            let answer = store.submit_part(
                DecisionRequest {
                    limits: &part,
                    bases: &part_bases,
                    cost,
                    dry_run,
                    receipt: commits,
                },
                now_us,
            );
            asked.push((slot, part, part_bases, indexes, answer));
        }
        let mut parts = Vec::with_capacity(asked.len());
        for (slot, set, bases, indexes, answer) in asked {
            parts.push(Part {
                slot,
                set,
                bases,
                indexes,
                result: answer.await,
            });
        }
        let joined = join(&set, &parts, cost, wants_receipt);
        let charged_in_vain = joined.as_ref().map_or(true, |d| !d.allowed());
        if commits && charged_in_vain {
            take_back(&store, parts);
        }
        joined
    })
}

/// The whole decision from its parts: blocked if a part is blocked, else rejected if a part
/// refused, else allowed; the longest wait; each limit's usage from its own part.
fn join(
    set: &LimitSet,
    parts: &[Part],
    cost: u64,
    wants_receipt: bool,
) -> Result<Decision, StoreError> {
    let mut limits = vec![
        LimitUsage {
            used: 0,
            limit: 0,
            reset: Duration::ZERO,
            retry_after: Duration::ZERO,
            in_flight: false,
        };
        set.limits.len()
    ];
    let mut outcome = Outcome::Allowed;
    let (mut retry_after, mut block_level, mut decided_at_us) = (Duration::ZERO, 0, 0);
    let mut block_left = Duration::ZERO;
    let mut receipt = Vec::new();
    for part in parts {
        let d = part.result.as_ref().map_err(Clone::clone)?;
        for (k, &i) in part.indexes.iter().enumerate() {
            limits[i] = d.limits[k].clone();
        }
        outcome = match (outcome, d.outcome) {
            (Outcome::Blocked, _) | (_, Outcome::Blocked) => Outcome::Blocked,
            (Outcome::Rejected, _) | (_, Outcome::Rejected) => Outcome::Rejected,
            _ => Outcome::Allowed,
        };
        if d.retry_after >= retry_after {
            retry_after = d.retry_after;
            block_level = block_level.max(d.block_level);
        }
        decided_at_us = decided_at_us.max(d.decided_at_us);
        block_left = block_left.max(d.block_left);
        if let Some(r) = &d.receipt {
            receipt.extend(r.parts.iter().map(|p| ReceiptPart {
                slot: Some(part.slot),
                ..p.clone()
            }));
        }
    }
    let allowed = outcome == Outcome::Allowed;
    Ok(Decision {
        outcome,
        retry_after,
        limits,
        decided_at_us,
        block_level,
        block_left,
        receipt: (allowed && wants_receipt && !receipt.is_empty()).then_some(Receipt {
            parts: receipt,
            cost,
        }),
        approximate: false,
    })
}

/// Refunds every part that charged, in the background (each rides in its lane's next call).
fn take_back<S: SlotStore>(store: &S, parts: Vec<Part>) {
    for part in parts {
        let Ok(Decision {
            receipt: Some(receipt),
            ..
        }) = part.result
        else {
            continue;
        };
        let settlement = Settlement {
            refund: (0..part.set.limits.len()).collect(),
            confirm: Vec::new(),
            unanswered: Vec::new(),
            reset: Vec::new(),
            settle_to: Vec::new(),
            at_us: None,
            limits: part.set,
            bases: part.bases,
            receipt,
            tags: Vec::new(),
        };
        store.settle_part(settlement);
    }
}

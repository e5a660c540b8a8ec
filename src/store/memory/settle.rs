//! Settlements on the memory store, as the settlement loop of `lua/decide.lua` makes them: a
//! limit's charge given back, confirmed, kept without an answer, reset (its answered charges
//! forgiven and its block lifted) or settled to a number of units.

use super::call::{params, state_mut, state_windows, Few, Keys, Slot, Value};
use crate::algorithm::Settled;
use crate::store::{LimitSet, ReceiptPart, Settlement};

/// The charge a settlement takes back: its first member, when it was made, its units, and per
/// key slot the tag of the value the attempt sent (`""` or `~<hex>`).
pub struct Charge<'a> {
    /// The member of its first unit.
    pub member: &'a str,
    /// When it was charged (µs).
    pub at: u64,
    /// Units charged.
    pub cost: u64,
    /// Per key slot of the set, the tag of the value sent.
    pub tags: &'a [String],
}

/// What a settlement does to a limit's charge (the script's settlement kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SettleKind {
    /// `r`: the charge goes back.
    Refund,
    /// `c`: answered and counted; no longer in flight.
    Confirm,
    /// `u`: counted though no answer came; never answered.
    Unanswered,
    /// `x`: the charge goes back, the answered charges are forgiven, the block lifted.
    Reset,
    /// `s<N>`: the charge comes to N units (at most the limit).
    To(u64),
}

/// Applies to `keys` what `settlement` does to one part of its receipt (`part`, the charge of
/// one call), at `now`: refunds, costs settled to their amount, confirmations (at the amount
/// settled), charges kept without an answer, then resets. `keys_of`: the set's keys.
pub fn apply(
    keys: &mut Keys,
    settlement: &Settlement,
    keys_of: &[String],
    part: &ReceiptPart,
    now: u64,
) {
    let set = &settlement.limits;
    let only = |i: &usize| part.slot.is_none_or(|s| set.slot_of(*i) == s);
    let charge = Charge {
        member: &part.member,
        at: part.decided_at_us,
        cost: settlement.receipt.cost,
        tags: &settlement.tags,
    };
    let apply = |keys: &mut Keys, kind, limits: &[usize]| {
        let limits: Few<usize> = limits.iter().copied().filter(only).collect();
        settle(keys, set, keys_of, kind, &limits, &charge, now);
    };
    apply(keys, SettleKind::Refund, &settlement.refund);
    // (a cost is settled to its amount before it is confirmed as answered)
    for &(i, amount) in &settlement.settle_to {
        apply(keys, SettleKind::To(amount), &[i]);
    }
    // (a settled cost is confirmed as the amount it came to)
    for &i in settlement.confirm.iter().filter(|i| only(i)) {
        let cost = settlement.settle_to.iter().find(|(l, _)| *l == i);
        let charge = Charge {
            cost: cost.map_or(charge.cost, |(_, amount)| *amount),
            ..charge
        };
        settle(keys, set, keys_of, SettleKind::Confirm, &[i], &charge, now);
    }
    apply(keys, SettleKind::Unanswered, &settlement.unanswered);
    apply(keys, SettleKind::Reset, &settlement.reset);
}

/// A settlement, as the settlement loop of `decide.lua`: `kind` for limits `limits` of `set`,
/// on the keys `keys_of`, at `now`.
fn settle(
    keys: &mut Keys,
    set: &LimitSet,
    keys_of: &[String],
    kind: SettleKind,
    limits: &[usize],
    charge: &Charge<'_>,
    now: u64,
) {
    if limits.is_empty() {
        return;
    }
    let q = set.states.len();
    let windows = state_windows(set);
    for &i in limits {
        let l = &set.limits[i];
        let key = &keys_of[l.state];
        let cost = l.cost_of(charge.cost);
        if let SettleKind::To(amount) = kind {
            let amount = amount.min(l.limit);
            // charging more writes the state, made afresh when it is gone (as HSET/ZADD do)
            let algorithm = set.states[l.state].algorithm;
            let exists = matches!(keys.get(key), Some(Some(_)));
            if amount <= cost && !exists {
                continue;
            }
            let state = state_mut(keys, key, || algorithm.get().new_state());
            let settled = Settled {
                member: charge.member,
                at: charge.at,
                cost,
                amount,
                longest: windows[l.state].0,
            };
            let outlive = state.settle(&params(set, i), &settled, now);
            let empty = state.is_empty();
            let slot = keys.get_mut(key).and_then(Option::as_mut).expect("made");
            if let Some(ms) = outlive {
                // PTTL below `ms` (or no expiry): PEXPIRE `ms`
                let left_ms = match slot.expires_at {
                    u64::MAX => -1,
                    at => (at.saturating_sub(now) / 1000) as i64,
                };
                if left_ms < ms as i64 {
                    slot.expires_at = now + ms * 1000;
                }
            }
            if empty {
                keys.insert(key.clone(), None);
            }
            continue;
        }
        // (a reset of a key with no state left lifts its block level)
        let mut lift = kind == SettleKind::Reset;
        if let Some(Some(Slot {
            value: Value::State(state),
            ..
        })) = keys.get_mut(key)
        {
            let limit = params(set, i);
            let (member, at) = (charge.member, charge.at);
            let tag = charge.tags.get(set.slot_of(i)).map_or("", String::as_str);
            match kind {
                SettleKind::Confirm => state.confirm(&limit, member, at, cost, tag, now),
                SettleKind::Unanswered => state.unanswered(&limit, member, at, cost, now),
                SettleKind::Refund | SettleKind::Reset => {
                    state.refund(&limit, member, at, cost, now)
                }
                SettleKind::To(_) => unreachable!("settled above"),
            }
            // a reset lifts the block level once nothing else is left (untagged: at once)
            let emptied = kind == SettleKind::Reset && state.clear(&l.name, tag, now);
            lift = kind == SettleKind::Reset && (tag.is_empty() || emptied);
            if state.is_empty() {
                keys.insert(key.clone(), None);
            }
        }
        if lift && set.block.is_some() {
            keys.insert(keys_of[q + set.slot_of(i)].clone(), None);
        }
    }
}

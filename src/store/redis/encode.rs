//! What one call sends: KEYS and ARGV in the layout `lua/decide.lua` documents (each distinct
//! limit set of the call once, then the settlements, then the decisions), and the call's token,
//! which makes every member the script writes unique across calls and gateways.

use std::sync::Arc;

use fred::types::{Key, Value};

use super::batch::{Batch, PendingSettlement};
use super::resp::push_decimal;
use crate::config::ClockSource;
use crate::store::{local_now_us, LimitSet};

/// KEYS and ARGV of one call, in the layout `lua/decide.lua` documents; `indexed` says whether
/// the call may record refusals in their routes' indexes itself (not in a cluster, where an
/// index lives on its own node).
pub fn encode(
    batch: &Batch,
    token: &str,
    clock: ClockSource,
    indexed: bool,
) -> (Vec<Key>, Vec<Value>) {
    let fixed = batch
        .decisions
        .first()
        .and_then(|d| d.fixed_now)
        .or_else(|| {
            // a call of settlements alone may be given its instant (tests)
            match batch.decisions.is_empty() {
                true => batch.settlements.iter().find_map(|s| s.at_us),
                false => None,
            }
        });
    let now = match (fixed, clock) {
        (Some(now), _) => Value::from(now as i64),
        (None, ClockSource::Local) => Value::from(local_now_us() as i64),
        (None, ClockSource::Redis) => Value::from(""),
    };
    let mut plans: Vec<&Arc<LimitSet>> = Vec::new();
    // A settlement that refunds some limits and resets others is an entry per kind (and per
    // tag of the value sent, for confirmations and resets; per amount, `s<N>`, for charges
    // settled to what their answer stated).
    let settlements: Vec<(i64, Entry<'_>)> = batch
        .settlements
        .iter()
        .flat_map(entries)
        .collect::<Vec<_>>()
        .into_iter()
        .map(|e| (plan_index(&mut plans, &e.of.limits), e))
        .collect();
    let decide_plans: Vec<i64> = batch
        .decisions
        .iter()
        .map(|d| plan_index(&mut plans, &d.limits))
        .collect();
    let mut args = Vec::with_capacity(8 + plans.len() * 12 + batch.decisions.len() * 2);
    args.push(now);
    // an empty token is the script's mark of a dry run
    args.push(Value::from(if batch.dry { "" } else { token }));
    args.push(Value::from(plans.len() as i64));
    args.extend(plans.iter().map(|plan| Value::Bytes(plan.text(indexed))));
    let mut keys = Vec::new();
    args.push(Value::from(settlements.len() as i64));
    for (plan, e) in settlements {
        args.extend([
            Value::from(plan),
            Value::from(e.kind.as_str()),
            Value::from(e.of.member.as_str()),
            Value::from(e.of.at as i64),
            Value::from(e.cost as i64),
            Value::from(e.limits.len() as i64),
        ]);
        args.extend(e.limits.iter().map(|&i| Value::from(i as i64 + 1)));
        keys.extend(e.of.keys.iter().cloned());
    }
    args.push(Value::from(batch.decisions.len() as i64));
    // "plan cost " per decision
    let mut decisions = Vec::with_capacity(batch.decisions.len() * 4);
    for (d, plan) in batch.decisions.iter().zip(decide_plans) {
        push_decimal(&mut decisions, plan);
        decisions.push(b' ');
        push_decimal(&mut decisions, d.cost as i64);
        decisions.push(b' ');
        keys.extend(d.keys.iter().cloned());
    }
    args.push(Value::Bytes(decisions.into()));
    (keys, args)
}

/// One entry of a settlement: its kind (`r`, `s<N>`, `c<tag>`, `x<tag>`), the limits it
/// settles, and the units it takes as the charge.
struct Entry<'a> {
    of: &'a PendingSettlement,
    kind: String,
    limits: Vec<usize>,
    cost: u64,
}

/// A settlement's entries: its refunds, then its charges settled to amounts, one entry per
/// amount (`s<N>`), then its confirmations and resets, one entry per tag (the kind followed by
/// the tag: `c~<hex>`); kinds with no limit are left out. A cost is settled to its amount
/// before it is confirmed, and confirmed as the amount it came to.
fn entries(s: &PendingSettlement) -> Vec<Entry<'_>> {
    let entry = |kind: String, limits: Vec<usize>, cost: u64| Entry {
        of: s,
        kind,
        limits,
        cost,
    };
    let mut out = Vec::new();
    if !s.refund.is_empty() {
        out.push(entry("r".to_string(), s.refund.clone(), s.cost));
    }
    let amount_of = |i: usize| s.settle_to.iter().find(|(l, _)| *l == i).map(|(_, a)| *a);
    for (amount, limits) in grouped(s.settle_to.iter().map(|&(i, a)| (a, i))) {
        out.push(entry(format!("s{amount}"), limits, s.cost));
    }
    let tag_of = |i: usize| s.tags.get(i).map_or("", String::as_str);
    let confirm = s.confirm.iter().map(|&i| {
        let cost = amount_of(i).unwrap_or(s.cost);
        ((format!("c{}", tag_of(i)), cost), i)
    });
    let reset = s
        .reset
        .iter()
        .map(|&i| ((format!("x{}", tag_of(i)), s.cost), i));
    for ((kind, cost), limits) in grouped(confirm).into_iter().chain(grouped(reset)) {
        out.push(entry(kind, limits, cost));
    }
    out
}

/// The limits grouped by what they share, in the order each group first appears.
fn grouped<G: PartialEq>(pairs: impl Iterator<Item = (G, usize)>) -> Vec<(G, Vec<usize>)> {
    let mut groups: Vec<(G, Vec<usize>)> = Vec::new();
    for (group, i) in pairs {
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, limits)) => limits.push(i),
            None => groups.push((group, vec![i])),
        }
    }
    groups
}

/// The 1-based index of `set` among the call's plans, adding it when new.
fn plan_index<'a>(plans: &mut Vec<&'a Arc<LimitSet>>, set: &'a Arc<LimitSet>) -> i64 {
    match plans.iter().position(|q| Arc::ptr_eq(q, set)) {
        Some(i) => i as i64 + 1,
        None => {
            plans.push(set);
            plans.len() as i64
        }
    }
}

/// A prefix unique to this process (eight base-62 characters, about 2^47 values), so members
/// written by different gateways never collide.
pub fn instance_id() -> String {
    let pid = std::process::id() as u64;
    let random = std::collections::hash_map::RandomState::new();
    let mut mixed = std::hash::BuildHasher::hash_one(&random, (local_now_us(), pid));
    let mut id = String::with_capacity(8);
    for _ in 0..8 {
        id.push(BASE62[(mixed % 62) as usize] as char);
        mixed /= 62;
    }
    id
}

const BASE62: &[u8; 62] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

/// The token of one call: the instance id, the call's sequence number in base 62, and a `.`
/// before the decision index the script appends (members stay short: Redis keeps one per unit).
pub fn call_token(instance: &str, mut sequence: u64) -> String {
    let mut digits = Vec::with_capacity(11);
    loop {
        digits.push(BASE62[(sequence % 62) as usize]);
        sequence /= 62;
        if sequence == 0 {
            break;
        }
    }
    let mut token = String::with_capacity(instance.len() + digits.len() + 1);
    token.push_str(instance);
    token.extend(digits.iter().rev().map(|&b| b as char));
    token.push('.');
    token
}

/// The member of decision `d` (from 1) of the call `token` names, as the script writes it:
/// `<token><d>`, its first unit's (a receipt names it to settle the decision later).
pub fn decision_member(token: &str, d: usize) -> String {
    let mut digits = itoa::Buffer::new();
    let d = digits.format(d);
    let mut member = String::with_capacity(token.len() + d.len());
    member.push_str(token);
    member.push_str(d);
    member
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_member_is_the_token_then_its_index() {
        assert_eq!(decision_member("abcdefgh10.", 1), "abcdefgh10.1");
        assert_eq!(decision_member("abcdefgh10.", 256), "abcdefgh10.256");
    }

    #[test]
    fn call_tokens_are_short_and_distinct() {
        let id = instance_id();
        assert_eq!(id.len(), 8);
        assert_eq!(call_token("abcdefgh", 0), "abcdefgh0.");
        assert_eq!(call_token("abcdefgh", 61), "abcdefghZ.");
        assert_eq!(call_token("abcdefgh", 62), "abcdefgh10.");
        let tokens: std::collections::HashSet<String> =
            (0..10_000).map(|s| call_token(&id, s)).collect();
        assert_eq!(tokens.len(), 10_000);
    }
}

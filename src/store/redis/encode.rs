//! What one call sends: KEYS and ARGV in the layout `lua/decide.lua` documents (each distinct
//! limit set of the call once, then the settlements, then the decisions), and the call's token,
//! which makes every member the script writes unique across calls and gateways.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
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
        (None, ClockSource::Redis) => Value::Bytes(Bytes::new()),
    };
    let mut plans: Vec<&Arc<LimitSet>> = Vec::new();
    let mut keys = Vec::new();
    // "plan kind member at cost M limit..." per settlement entry
    let (mut settled, mut entry_count) = (Vec::new(), 0_i64);
    for s in &batch.settlements {
        let plan = plan_index(&mut plans, &s.limits);
        for entry in entries(s) {
            entry.push_args(&mut settled, plan, s);
            keys.extend(s.keys.iter().cloned());
            entry_count += 1;
        }
    }
    // "plan cost " per decision
    let mut decisions = Vec::with_capacity(batch.decisions.len() * 4);
    for d in &batch.decisions {
        push_decimal(&mut decisions, plan_index(&mut plans, &d.limits));
        decisions.push(b' ');
        push_decimal(&mut decisions, d.cost as i64);
        decisions.push(b' ');
        keys.extend(d.keys.iter().cloned());
    }
    let mut args = Vec::with_capacity(6 + plans.len() + settled.len());
    args.push(now);
    // an empty token is the script's mark of a dry run
    let token = if batch.dry { "" } else { token };
    args.push(Value::Bytes(Bytes::copy_from_slice(token.as_bytes())));
    args.push(Value::from(plans.len() as i64));
    args.extend(plans.iter().map(|plan| Value::Bytes(plan.text(indexed))));
    args.push(Value::from(entry_count));
    args.append(&mut settled);
    args.push(Value::from(batch.decisions.len() as i64));
    args.push(Value::Bytes(decisions.into()));
    (keys, args)
}

/// What one entry of a settlement does to its limits.
#[derive(PartialEq)]
enum Kind<'a> {
    /// `r`: the charge goes back (a slot in flight is freed).
    Refund,
    /// `l`: the charge goes back if it was made (a release).
    Release,
    /// `s<N>`: the charge becomes N units.
    SettleTo(u64),
    /// `c<tag>`: answered and counted, keeping the tag of the value sent.
    Confirm(&'a str),
    /// `u`: counted though no answer came.
    Unanswered,
    /// `x<tag>`: the charge goes back and the answered ones (of the tag's value) are forgiven.
    Reset(&'a str),
}

/// One entry of a settlement: its kind, the limits it settles, and the units it takes as the
/// charge.
struct Entry<'a> {
    kind: Kind<'a>,
    limits: Cow<'a, [usize]>,
    cost: u64,
}

impl Entry<'_> {
    /// Appends the entry's arguments as the script reads them: plan, kind, member, charge
    /// instant, cost, M and the M limits (from 1).
    fn push_args(&self, args: &mut Vec<Value>, plan: i64, of: &PendingSettlement) {
        args.extend([
            Value::from(plan),
            self.kind_arg(),
            Value::Bytes(Bytes::copy_from_slice(of.member.as_bytes())),
            Value::from(of.at as i64),
            Value::from(self.cost as i64),
            Value::from(self.limits.len() as i64),
        ]);
        args.extend(self.limits.iter().map(|&i| Value::from(i as i64 + 1)));
    }

    /// The kind as the script reads it: `r`, `l`, `s<N>`, `c<tag>`, `u` or `x<tag>` (the untagged ones
    /// without an allocation).
    fn kind_arg(&self) -> Value {
        let text = match self.kind {
            Kind::Refund => return Value::Bytes(Bytes::from_static(b"r")),
            Kind::Release => return Value::Bytes(Bytes::from_static(b"l")),
            Kind::Confirm("") => return Value::Bytes(Bytes::from_static(b"c")),
            Kind::Unanswered => return Value::Bytes(Bytes::from_static(b"u")),
            Kind::Reset("") => return Value::Bytes(Bytes::from_static(b"x")),
            Kind::SettleTo(amount) => format!("s{amount}"),
            Kind::Confirm(tag) => format!("c{tag}"),
            Kind::Reset(tag) => format!("x{tag}"),
        };
        Value::Bytes(text.into())
    }
}

/// A settlement's entries: its refunds, its releases, then its charges settled to amounts, one entry per
/// amount (`s<N>`), then its confirmations, one entry per tag (the kind followed by the tag:
/// `c~<hex>`), its charges kept without an answer (`u`), and its resets, one entry per tag;
/// kinds with no limit are left out. A cost is settled to its amount
/// before it is confirmed, and confirmed as the amount it came to.
fn entries(s: &PendingSettlement) -> Vec<Entry<'_>> {
    let mut out = Vec::new();
    if !s.refund.is_empty() {
        out.push(Entry {
            kind: Kind::Refund,
            limits: Cow::Borrowed(&s.refund),
            cost: s.cost,
        });
    }
    if !s.release.is_empty() {
        out.push(Entry {
            kind: Kind::Release,
            limits: Cow::Borrowed(&s.release),
            cost: s.cost,
        });
    }
    let amount_of = |i: usize| s.settle_to.iter().find(|(l, _)| *l == i).map(|(_, a)| *a);
    for (amount, limits) in grouped(s.settle_to.iter().map(|&(i, a)| (a, i))) {
        out.push(Entry {
            kind: Kind::SettleTo(amount),
            limits: Cow::Owned(limits),
            cost: s.cost,
        });
    }
    let tag_of = |i: usize| s.tags.get(i).map_or("", String::as_str);
    let confirm = s.confirm.iter().map(|&i| {
        let cost = amount_of(i).unwrap_or(s.cost);
        ((Kind::Confirm(tag_of(i)), cost), i)
    });
    let reset = s
        .reset
        .iter()
        .map(|&i| ((Kind::Reset(tag_of(i)), s.cost), i));
    let unanswered = s
        .unanswered
        .iter()
        .map(|&i| ((Kind::Unanswered, s.cost), i));
    let groups = grouped(confirm).into_iter().chain(grouped(unanswered));
    for ((kind, cost), limits) in groups.chain(grouped(reset)) {
        out.push(Entry {
            kind,
            limits: Cow::Owned(limits),
            cost,
        });
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

    /// A settlement with every kind of entry, as in the script's layout: an entry's arguments
    /// are plan, kind, member, charge instant, cost, M and the M limits from 1.
    #[test]
    fn a_settlement_is_sent_entry_by_entry() {
        let settlement = PendingSettlement {
            limits: Arc::new(LimitSet::new(None, Vec::new(), Vec::new(), 1)),
            keys: vec![Key::from("k")],
            member: "abcdefgh1.2".into(),
            at: 1_700_000_000_000_000,
            cost: 3,
            refund: vec![0],
            release: vec![8],
            confirm: vec![1, 2, 3],
            unanswered: vec![5, 6],
            reset: vec![4],
            settle_to: vec![(1, 7), (2, 7), (3, 9)],
            at_us: None,
            tags: vec![
                String::new(),
                "~aa".into(),
                "~aa".into(),
                String::new(),
                "~bb".into(),
                String::new(),
                String::new(),
            ],
            deadline: super::super::deadline::Deadline::after(std::time::Duration::from_secs(1)),
            done: None,
        };
        let mut args = Vec::new();
        for entry in entries(&settlement) {
            entry.push_args(&mut args, 1, &settlement);
        }
        let text: Vec<String> = args
            .iter()
            .map(|v| match v {
                Value::Integer(n) => n.to_string(),
                Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
                other => panic!("unexpected argument {other:?}"),
            })
            .collect();
        let entry = |kind: &str, cost: &str, limits: &[&str]| {
            let m = limits.len().to_string();
            let head = ["1", kind, "abcdefgh1.2", "1700000000000000", cost, &m];
            let all = head.iter().chain(limits).map(|s| s.to_string());
            all.collect::<Vec<_>>()
        };
        let expected: Vec<String> = [
            entry("r", "3", &["1"]),
            entry("l", "3", &["9"]),
            entry("s7", "3", &["2", "3"]),
            entry("s9", "3", &["4"]),
            // confirmed as the amounts they came to, one entry per tag and amount
            entry("c~aa", "7", &["2", "3"]),
            entry("c", "9", &["4"]),
            // kept without an answer: untagged, one entry
            entry("u", "3", &["6", "7"]),
            entry("x~bb", "3", &["5"]),
        ]
        .concat();
        assert_eq!(text, expected);
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

//! Who is refused now. Each refusal a charging decision answers records its key in a bounded,
//! expiring index of its route ([`super::layout::blocked_index`], a sorted set): per key slot,
//! the recording limit with the longest wait names it, member `<limit>|<material>` (the key as
//! stored: a long or unusual key hashed), scored by when the refusal ends (µs; one told only
//! until attempts in flight are settled, when the window's would: if they fail, it refuses the
//! key that long), and the refusal's instant beside it (the hash [`instants_of`] the index), by which the index is
//! listed newest first. The index keeps the [`MAX_REFUSED`] latest-ending entries and expires
//! with the last, so a flood of short refusals cannot push out a long block, and an idle
//! route's index vanishes. Only refusals write: an allowed request costs nothing, and the deny
//! cache answers a key's repeats without the store.
//!
//! The rule runs inside the decision (`lua/decide.lua`'s `record_refusal`) wherever the index
//! can be reached from it; it is written once more here for the memory store's twin and for a
//! Redis Cluster, where the index lives on another node than the decision's keys and the
//! gateway writes it after the call.

use super::{Decision, LimitSet, Outcome};

/// Most entries a route's index keeps (the latest-ending).
pub const MAX_REFUSED: usize = 1000;

/// One refusal as the index holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// `<limit>|<material>`.
    pub member: String,
    /// When the refusal ends, in microseconds of the deciding clock.
    pub until_us: u64,
    /// How long it lasts from the decision (the index lives at least this long).
    pub wait_us: u64,
    /// When it was decided, in microseconds of the deciding clock.
    pub at_us: u64,
}

/// A refusal that has not ended, as the index lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// `<limit>|<material>`.
    pub member: String,
    /// When it ends (µs).
    pub until_us: u64,
    /// When it was decided (µs; 0 when the index does not say).
    pub at_us: u64,
}

/// `recorded` newest first (the latest decided; of equals, the latest-ending).
pub fn newest_first(recorded: &mut [Recorded]) {
    recorded
        .sort_by(|a, b| (b.at_us, b.until_us, &b.member).cmp(&(a.at_us, a.until_us, &a.member)));
}

/// The hash beside refusal index `index` that holds each member's instant (the same hash tag,
/// so the same node; the script names it so too).
pub fn instants_of(index: &str) -> String {
    format!("{index}:at")
}

/// The entries a decision records: none unless it charged (`cost` > 0) and refused; then, per
/// key slot, the recording limit of that slot with the longest wait (the first of equals),
/// ending at the decision's instant plus that wait.
pub fn refused_entries(
    set: &LimitSet,
    bases: &[String],
    cost: u64,
    decision: &Decision,
) -> Vec<Refused> {
    let Some(refusals) = &set.refusals else {
        return Vec::new();
    };
    if cost == 0 || decision.outcome == Outcome::Allowed {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (slot, base) in bases.iter().enumerate() {
        let mut named: Option<(usize, u64)> = None;
        for (i, usage) in decision.limits.iter().enumerate() {
            let wait = recorded_wait(usage, set.limits[i].window_us);
            let longer = named.is_none_or(|(_, longest)| wait > longest);
            if wait > 0 && longer && refusals.recorded[i] && set.slot_of(i) == slot {
                named = Some((i, wait));
            }
        }
        if let Some((i, wait)) = named {
            out.push(Refused {
                member: member(&set.limits[i].name, material_of(base)),
                until_us: decision.decided_at_us + wait,
                wait_us: wait,
                at_us: decision.decided_at_us,
            });
        }
    }
    out
}

/// How long a limit's refusal stays in the index: its wait, or, for one standing on attempts
/// in flight (told only until the soonest is settled), the window: if they fail, the window
/// refuses the key that long. The listing checks every entry against the store, so a key the
/// settled attempts left room for is not listed.
fn recorded_wait(usage: &super::LimitUsage, window_us: u64) -> u64 {
    let wait = usage.retry_after.as_micros() as u64;
    match usage.in_flight && wait > 0 {
        true => wait.max(window_us),
        false => wait,
    }
}

/// `<limit>|<material>`.
pub fn member(limit: &str, material: &str) -> String {
    format!("{limit}|{material}")
}

/// A member's limit and material.
pub fn split_member(member: &str) -> Option<(&str, &str)> {
    member.split_once('|')
}

/// The material of a base (`<prefix>:{<route><tag>|<material>}`): what follows the first `|`
/// of the hash tag (route names and tags hold none) up to its end. The script reads it so from
/// a state key.
pub fn material_of(base: &str) -> &str {
    let tag = base.find('{').map_or(base, |open| &base[open + 1..]);
    let tag = tag.strip_suffix('}').unwrap_or(tag);
    tag.split_once('|').map_or(tag, |(_, m)| m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn material_is_read_from_the_base() {
        assert_eq!(material_of("sg:{otp|203.0.113.7|POST}"), "203.0.113.7|POST");
        assert_eq!(material_of("sg:{otp~ab12cd34|#0123}"), "#0123");
        assert_eq!(
            split_member("per-ip|1.2.3.4|x"),
            Some(("per-ip", "1.2.3.4|x"))
        );
    }
}

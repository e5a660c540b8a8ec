//! What a store answers: the [`Decision`] for one request, decoded from the scripts' reply layout
//! (documented in `lua/README.md`) in one place for both stores, and [`StoreError`].

use std::time::Duration;

use super::LimitSet;

/// What an allowed, charged decision leaves behind so it can be taken back: the members its
/// charge wrote (one per part: a cluster decides a request whose keys live in several slots one
/// part per slot), when, and for how many units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// The charge of each part.
    pub parts: Vec<ReceiptPart>,
    /// Units charged.
    pub cost: u64,
}

/// The charge of one part of a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptPart {
    /// The key slot the part counted, or `None` when one call decided every slot.
    pub slot: Option<usize>,
    /// The member of its first unit (`<call token><decision>`).
    pub member: String,
    /// The instant it was charged at, in microseconds of the deciding clock.
    pub decided_at_us: u64,
    /// Limits (indexes) the memory store counted in its overflow sketch, each with the fixed
    /// window it added the charge to, so a settlement can take back there what it gives back
    /// (empty elsewhere).
    pub sketched: Vec<(usize, u64)>,
}

/// How one decision came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every limit had room; all were charged.
    Allowed,
    /// Some limit had no room; nothing was charged (a blocking route starts its block here).
    Rejected,
    /// The key is serving a block; nothing was charged.
    Blocked,
}

/// One limit's state after a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitUsage {
    /// Units counted in the window after the decision.
    pub used: u64,
    /// The limit in force for this key.
    pub limit: u64,
    /// Until the next unit of this quota comes back.
    pub reset: Duration,
    /// Until this limit alone would let the request through; zero when it has room.
    pub retry_after: Duration,
    /// Its refusal stands only on reservations still in flight (`retry_after` is until the
    /// soonest of them is settled), or on attempts kept without an answer (`retry_after` is
    /// the window's): it started no block.
    pub in_flight: bool,
}

impl LimitUsage {
    /// Units left in the window.
    pub fn remaining(&self) -> u64 {
        self.limit.saturating_sub(self.used)
    }

    /// Whether this limit refused the request.
    pub fn exceeded(&self) -> bool {
        !self.retry_after.is_zero()
    }
}

/// Values of a reply before its per-limit ones: code, retry (µs), block level, and what is left
/// of the block serving a blocked decision (µs, 0 otherwise).
pub const REPLY_HEAD: usize = 4;

/// The answer for one request: outcome, how long to wait, and every limit's state in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Allowed, rejected or blocked.
    pub outcome: Outcome,
    /// Zero when allowed; otherwise the exact wait until the request would fit.
    pub retry_after: Duration,
    /// Per limit, in the route's order.
    pub limits: Vec<LimitUsage>,
    /// The instant the store decided at, in microseconds since the epoch of its clock.
    pub decided_at_us: u64,
    /// The block level of the key the decision names (the block serving, the block started,
    /// or the highest level one of its keys keeps); 0 when none.
    pub block_level: u64,
    /// What is left of the block serving a blocked decision (zero otherwise): the store's own
    /// count, whichever instance started it or saw it start.
    pub block_left: Duration,
    /// How to take the charge back (outcome-counted routes only).
    pub receipt: Option<Receipt>,
    /// Some limit was counted in the in-process store's overflow sketch (the store was full of
    /// other keys), which can only over-count: the 429 body says `"approximate": true`.
    pub approximate: bool,
}

impl Decision {
    /// Values per decision in a reply: [`REPLY_HEAD`], then three per limit.
    pub fn reply_len(limits: &LimitSet) -> usize {
        REPLY_HEAD + 3 * limits.limits.len()
    }

    /// Decodes one decision of a script reply (`{code, retry_us, block_level, block_left_us,
    /// used_i, reset_us_i, retry_us_i ...}`) made at `decided_at_us` for a key with these
    /// limits.
    pub fn from_reply(
        limits: &LimitSet,
        reply: &[i64],
        decided_at_us: u64,
    ) -> Result<Decision, StoreError> {
        if reply.len() != Self::reply_len(limits) {
            return Err(StoreError::Script(format!(
                "reply has {} values, expected {}",
                reply.len(),
                Self::reply_len(limits)
            )));
        }
        let outcome = match reply[0] {
            1 => Outcome::Allowed,
            0 => Outcome::Rejected,
            2 => Outcome::Blocked,
            code => return Err(StoreError::Script(format!("unknown decision code {code}"))),
        };
        let micros = |v: i64| Duration::from_micros(v.max(0) as u64);
        let usage: Vec<LimitUsage> = limits
            .limits
            .iter()
            .zip(reply[REPLY_HEAD..].chunks_exact(3))
            .map(|(l, v)| {
                // negative: a refusal that stands on reservations in flight, whose magnitude
                // is the time until `settle_us` after the soonest one's charge; it is told as
                // the time until that attempt's answer is due, the upstream's `timeout` after
                // its charge (the connect timeout and the margin of `settle_us` left out: at
                // most that `timeout`). Or, past `settle_us`, a refusal on attempts kept
                // without an answer, whose wait is the window's (the magnitude less
                // `settle_us`)
                let in_flight = v[2] < 0;
                let magnitude = v[2].unsigned_abs();
                let mut retry_after = Duration::from_micros(magnitude);
                if in_flight && magnitude > l.settle_us {
                    retry_after = Duration::from_micros(magnitude - l.settle_us);
                } else if in_flight && l.flight_wait_us > 0 {
                    let margin = l.settle_us.saturating_sub(l.flight_wait_us);
                    retry_after = Duration::from_micros(magnitude.saturating_sub(margin).max(1));
                }
                LimitUsage {
                    used: v[0].max(0) as u64,
                    limit: l.limit,
                    reset: micros(v[1]),
                    retry_after,
                    in_flight,
                }
            })
            .collect();
        let mut retry_after = micros(reply[1]);
        if outcome == Outcome::Rejected && usage.iter().any(|u| u.in_flight) {
            // the longest of the refusing limits' waits, those in flight bounded
            retry_after = (usage.iter().map(|u| u.retry_after).max()).unwrap_or(retry_after);
        }
        Ok(Decision {
            outcome,
            retry_after,
            limits: usage,
            decided_at_us,
            block_level: reply[2].max(0) as u64,
            block_left: micros(reply[3]),
            receipt: None,
            approximate: false,
        })
    }

    /// The decision for a key with no limits: allowed, nothing counted.
    pub fn unlimited() -> Decision {
        Decision {
            outcome: Outcome::Allowed,
            retry_after: Duration::ZERO,
            limits: Vec::new(),
            decided_at_us: 0,
            block_level: 0,
            block_left: Duration::ZERO,
            receipt: None,
            approximate: false,
        }
    }

    /// Whether the request may go on.
    pub fn allowed(&self) -> bool {
        self.outcome == Outcome::Allowed
    }

    /// Whether a rejection stands on answered attempts: some limit refused on more than the
    /// reservations still in flight (once one of those is answered, a refusal that stood on
    /// them alone may go another way).
    pub fn refused_on_answers(&self) -> bool {
        self.outcome == Outcome::Rejected
            && self.limits.iter().any(|l| l.exceeded() && !l.in_flight)
    }

    /// Whether a rejection started blocks: a limit of `set` that starts them refused on
    /// answered attempts, and the store says the level (0: no marker set, as in the memory
    /// store's overflow sketch). A limit on attempts in flight (`concurrency`) starts none.
    pub fn starts_blocks(&self, set: &LimitSet) -> bool {
        let started = self.outcome == Outcome::Rejected && self.block_level > 0;
        started && self.limits_starting_blocks(set).next().is_some()
    }

    /// Whether the refusal holds whatever the request's cost: every limit of `set` that refused
    /// counts attempts, not units (a full `concurrency` key refuses one unit as it refuses 50).
    pub fn refused_whatever_the_cost(&self, set: &LimitSet) -> bool {
        let mut refusing = (self.limits.iter().enumerate()).filter(|(_, l)| l.exceeded());
        refusing.all(|(i, _)| set.limits.get(i).is_some_and(|s| s.per_attempt))
    }

    /// Whether a request of `cost` units would be refused as this one was, with the same waits:
    /// every limit of `set` that counts units had room for `cost` (a limit that counts attempts
    /// refuses, and waits, alike whatever the cost).
    pub fn refuses_alike(&self, set: &LimitSet, cost: u64) -> bool {
        (self.limits.iter().enumerate()).all(|(i, l)| {
            let per_attempt = set.limits.get(i).is_some_and(|s| s.per_attempt);
            per_attempt || (!l.exceeded() && l.used + cost <= l.limit)
        })
    }

    /// Joins `other`, a refusal of the same request's limits cached for another of its keys (each
    /// key's refusal shows its own limits): each limit as the refusal that has it to wait longer
    /// (or counts more of it), the longest wait, the block of either.
    pub fn join(&mut self, other: &Decision) {
        for (mine, theirs) in self.limits.iter_mut().zip(&other.limits) {
            if (theirs.retry_after, theirs.used) > (mine.retry_after, mine.used) {
                *mine = theirs.clone();
            }
        }
        if other.outcome == Outcome::Blocked {
            self.outcome = Outcome::Blocked;
        }
        self.retry_after = self.retry_after.max(other.retry_after);
        self.block_level = self.block_level.max(other.block_level);
        self.block_left = self.block_left.max(other.block_left);
        self.approximate |= other.approximate;
    }

    /// The limits of `set` whose refusal started a block: each that starts blocks and refused
    /// on answered attempts (see [`Decision::starts_blocks`]).
    pub fn limits_starting_blocks<'a>(
        &'a self,
        set: &'a LimitSet,
    ) -> impl Iterator<Item = usize> + 'a {
        let starts = |i: usize| set.limits.get(i).is_some_and(|s| s.starts_blocks);
        (self.limits.iter().enumerate())
            .filter(move |(i, l)| l.exceeded() && !l.in_flight && starts(*i))
            .map(|(i, _)| i)
    }

    /// Indexes of the limits that refused the request, in the route's order (a 429's
    /// `violated-policies`).
    pub fn exceeded_limits(&self) -> impl Iterator<Item = usize> + '_ {
        self.limits
            .iter()
            .enumerate()
            .filter(|(_, l)| l.exceeded())
            .map(|(i, _)| i)
    }

    /// The limits a refusal names as violated (its `violated-policies`, and where
    /// `slidegate_limit_exceeded_total` counts it): each exceeded one; a refusal that finds none
    /// exceeded (a block the in-process store's overflow sketch serves) names the first, as its
    /// body does, so every 429 names a limit.
    pub fn violated_limits(&self) -> impl Iterator<Item = usize> + '_ {
        let none_exceeded = !self.limits.iter().any(LimitUsage::exceeded);
        let first = none_exceeded && self.outcome != Outcome::Allowed && !self.limits.is_empty();
        self.exceeded_limits().chain(first.then_some(0))
    }

    /// Index of the limit a rejection names: the exceeded one with the longest wait.
    pub fn rejecting_limit(&self) -> Option<usize> {
        self.exceeded_limits()
            .max_by_key(|&i| (self.limits[i].retry_after, std::cmp::Reverse(i)))
    }

    /// Index of the limit the headers describe on an allowed response: least remaining, ties to
    /// the soonest reset.
    pub fn tightest_limit(&self) -> Option<usize> {
        self.limits
            .iter()
            .enumerate()
            .min_by_key(|(i, l)| (l.remaining(), l.reset, *i))
            .map(|(i, _)| i)
    }

    /// The limit a response describes: the rejecting one on a rejection, else the tightest.
    pub fn described_limit(&self) -> Option<usize> {
        if self.allowed() {
            self.tightest_limit()
        } else {
            self.rejecting_limit().or_else(|| self.tightest_limit())
        }
    }

    /// The same decision seen `elapsed` later (for answers from the deny cache): each wait the
    /// shorter by it, a limit whose wait has passed no longer refusing.
    pub fn aged(&self, elapsed: Duration) -> Decision {
        let mut later = Decision {
            receipt: None,
            ..self.clone()
        };
        later.age(elapsed);
        later
    }

    /// Makes this the decision seen `elapsed` later, in place (the headers of an answer that
    /// came that long after its decision): each wait and reset the shorter by it, the instant
    /// the later one. A unit that came back meanwhile is not counted back (the store was not
    /// asked again): the reset of a limit still in use stops at the next instant, not at 0.
    pub fn age(&mut self, elapsed: Duration) {
        self.retry_after = self.retry_after.saturating_sub(elapsed);
        for l in &mut self.limits {
            let least = match l.used {
                0 => Duration::ZERO,
                _ => l.reset.min(Duration::from_millis(1)),
            };
            l.reset = l.reset.saturating_sub(elapsed).max(least);
            // a limit whose own wait has passed refuses no more (the 429's `violated-policies`
            // leaves it out)
            l.retry_after = l.retry_after.saturating_sub(elapsed);
        }
        self.decided_at_us += elapsed.as_micros() as u64;
        self.block_left = self.block_left.saturating_sub(elapsed);
    }
}

/// Why the store could not decide.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// No answer within `store.timeout`.
    #[error("store timed out after {0:?}")]
    Timeout(Duration),
    /// Not connected, or the connection broke.
    #[error("store connection failed: {0}")]
    Connection(String),
    /// The server answered, but refused the credentials (`WRONGPASS`, `NOAUTH`): no wait
    /// mends it, only the right password.
    #[error("store refused the credentials: {0}")]
    Refused(String),
    /// The script failed or replied in an unexpected shape.
    #[error("rate-limit script failed: {0}")]
    Script(String),
    /// Fewer replicas than `store.replica_acks` acknowledged a charge within `store.timeout`
    /// (`acknowledged`: what `WAIT` answered, `None` when no answer came in time). The charge
    /// stays on the master.
    #[error("{}", unreplicated(*acknowledged, *wanted, *within))]
    Unreplicated {
        /// Replicas that acknowledged, when `WAIT` answered.
        acknowledged: Option<u64>,
        /// Replicas asked for: `store.replica_acks`, or fewer when the master has fewer.
        wanted: u32,
        /// `store.timeout`.
        within: Duration,
    },
    /// The server lacks what the configuration requires (`store.scripts = "functions"` on a
    /// server without Redis Functions).
    #[error("store unsupported: {0}")]
    Unsupported(String),
    /// Anything else.
    #[error("store error: {0}")]
    Other(String),
}

/// What [`StoreError::Unreplicated`] says.
fn unreplicated(acknowledged: Option<u64>, wanted: u32, within: Duration) -> String {
    match acknowledged {
        Some(n) => format!("{n} of {wanted} replica(s) acknowledged the charge within {within:?}"),
        None => format!("no word from the replicas within {within:?} ({wanted} asked for)"),
    }
}

impl StoreError {
    /// The `kind` label of `slidegate_store_errors_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            // The replicas did not acknowledge in time: the store did not confirm the decision
            // within store.timeout.
            StoreError::Timeout(_) | StoreError::Unreplicated { .. } => "timeout",
            StoreError::Connection(_) | StoreError::Refused(_) => "connection",
            StoreError::Script(_) | StoreError::Unsupported(_) => "script",
            StoreError::Other(_) => "other",
        }
    }
}

#[cfg(test)]
#[path = "decision_tests.rs"]
mod tests;

//! What a lane's call carries ([`Batch`]): the decisions and settlements waiting for it
//! ([`Pending`], [`PendingSettlement`]), the answer each decision gets ([`Answer`]) and the bounds
//! of one call. Plain data, below the lane that queues it and the call that sends it.

use std::collections::HashMap;
use std::sync::Arc;

use fred::types::Key;
use tokio::sync::oneshot;

use super::deadline::Deadline;
use crate::store::{DecisionRequest, LimitSet, StoreError};

/// Most decisions one call carries (a 10,000-key batch becomes a few dozen pipelined calls,
/// none of which holds Redis for long).
pub const MAX_PER_CALL: usize = 256;
/// Most settlements one call carries ahead of its decisions.
pub const MAX_SETTLEMENTS_PER_CALL: usize = 64;
/// Most units one call charges (beyond its first decision): a sliding log writes a member per
/// unit, about a microsecond each, so a batch of large costs is spread over calls that each
/// hold Redis no longer than the largest single charge (10,000 units, a `sliding_log` limit's
/// most) does.
pub const MAX_UNITS_PER_CALL: u64 = 10_000;

/// One decision waiting for its call.
pub struct Pending {
    /// The request's effective limits (calls list each distinct set once).
    pub limits: Arc<LimitSet>,
    /// Its keys: one per state, then the block markers when it blocks.
    pub keys: Vec<Key>,
    /// Units to spend: 0 reads.
    pub cost: u64,
    /// Whether it belongs to a dry run (decided in a call that writes nothing).
    pub dry: bool,
    /// Whether the answer carries the decision's member (to take its charge back).
    pub receipt: bool,
    /// An explicit instant (tests, replays), or `None` for the configured clock.
    pub fixed_now: Option<u64>,
    /// When the request stops waiting and its route's `on_error` applies.
    pub deadline: Deadline,
    /// Where its answer goes.
    pub reply: oneshot::Sender<Result<Answer, StoreError>>,
}

impl Pending {
    /// `request` waiting for its call until `deadline` (at `now_us` when the caller fixes the
    /// instant), and where its answer will come.
    pub fn of(
        request: DecisionRequest<'_>,
        now_us: Option<u64>,
        deadline: Deadline,
    ) -> (Pending, oneshot::Receiver<Result<Answer, StoreError>>) {
        let (reply, answer) = oneshot::channel();
        let keys = (request.limits.keys(request.bases).into_iter())
            .map(Key::from)
            .collect();
        let pending = Pending {
            limits: request.limits.clone(),
            keys,
            cost: request.cost,
            dry: request.dry_run,
            receipt: request.receipt && request.cost > 0 && !request.dry_run,
            fixed_now: now_us,
            deadline,
            reply,
        };
        (pending, answer)
    }
}

/// One settlement waiting for a call.
pub struct PendingSettlement {
    /// The limits the settled decision was made with.
    pub limits: Arc<LimitSet>,
    /// Its keys, as the decision's.
    pub keys: Vec<Key>,
    /// The decision's first member, charge instant and cost.
    pub member: String,
    /// When it was charged (µs).
    pub at: u64,
    /// Units it charged.
    pub cost: u64,
    /// Limits whose charge goes back.
    pub refund: Vec<usize>,
    /// Limits whose charge goes back if it was made: the release of a charge that a call
    /// answered by `on_error` may have left behind ([`super::release`]), which takes back only
    /// what it finds (a refund of a charge never made would take back another's).
    pub release: Vec<usize>,
    /// Limits whose charge was answered and stays counted.
    pub confirm: Vec<usize>,
    /// Limits whose charge stays counted though no answer came.
    pub unanswered: Vec<usize>,
    /// Limits whose answered count is cleared (the charge itself going back).
    pub reset: Vec<usize>,
    /// Limits whose charge becomes the units given.
    pub settle_to: Vec<(usize, u64)>,
    /// The instant to settle at, when the caller fixes it (tests); else the call's.
    pub at_us: Option<u64>,
    /// Per limit of `limits`, the tag of the value the attempt sent (`""`: none).
    pub tags: Vec<String>,
    /// When it stops waiting.
    pub deadline: Deadline,
    /// Told once it is applied (or failed); `None`: no one waits, and a failure is logged.
    pub done: Option<oneshot::Sender<Result<(), StoreError>>>,
}

impl PendingSettlement {
    /// Tells whoever waits how it went; with no one waiting, a failure is logged here.
    pub fn tell(self, result: Result<(), StoreError>) {
        match (self.done, result) {
            (Some(done), result) => {
                let _ = done.send(result);
            }
            (None, Ok(())) => {}
            (None, Err(e)) => {
                let key = self
                    .keys
                    .first()
                    .map(|k| String::from_utf8_lossy(k.as_bytes()));
                tracing::warn!(key = ?key, error = %e, "could not settle an attempt's charge");
            }
        }
    }
}

/// A decision's part of a reply and the instant the script decided at.
pub struct Answer {
    /// `code, retry_us, block_level, used_i, reset_us_i, retry_us_i ...`
    pub values: Vec<i64>,
    /// The script's `now`, microseconds since the epoch.
    pub decided_at_us: u64,
    /// The member of its first unit, when asked for.
    pub member: Option<String>,
}

/// What one call carries.
#[derive(Default)]
pub struct Batch {
    /// Settlements, applied first.
    pub settlements: Vec<PendingSettlement>,
    /// Decisions, in arrival order.
    pub decisions: Vec<Pending>,
    /// Whether the call is a dry run: its decisions are made, nothing is written.
    pub dry: bool,
}

impl Batch {
    /// This batch cut into one batch per key (what share the same keys, in arrival order), for
    /// calls routed by slot.
    pub fn per_key(self) -> Vec<Batch> {
        let mut by_keys: HashMap<Vec<Key>, Batch> = HashMap::new();
        for s in self.settlements {
            by_keys
                .entry(s.keys.clone())
                .or_default()
                .settlements
                .push(s);
        }
        for d in self.decisions {
            by_keys.entry(d.keys.clone()).or_default().decisions.push(d);
        }
        let mut groups: Vec<Batch> = by_keys.into_values().collect();
        for group in &mut groups {
            group.dry = self.dry;
        }
        groups
    }

    /// Whether it carries nothing.
    pub fn is_empty(&self) -> bool {
        self.settlements.is_empty() && self.decisions.is_empty()
    }

    /// The earliest deadline of anything in it.
    pub fn deadline(&self) -> Deadline {
        self.settlements
            .iter()
            .map(|s| s.deadline)
            .chain(self.decisions.iter().map(|d| d.deadline))
            .min()
            .expect("a call carries something")
    }

    /// Answers everything in it with `error`.
    pub fn fail(self, error: StoreError) {
        for s in self.settlements {
            s.tell(Err(error.clone()));
        }
        for d in self.decisions {
            let _ = d.reply.send(Err(error.clone()));
        }
    }
}

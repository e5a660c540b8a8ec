//! What a store is asked: a decision ([`DecisionRequest`]) and a settlement of a charge it made
//! ([`Settlement`]), and the gateway's own clock ([`local_now_us`]).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use super::decision::Receipt;
use super::plan::LimitSet;

/// One decision a store is asked for.
#[derive(Debug, Clone, Copy)]
pub struct DecisionRequest<'a> {
    /// The request's effective limits.
    pub limits: &'a Arc<LimitSet>,
    /// The base of each key slot (`layout::base`), in slot order.
    pub bases: &'a [String],
    /// Units this request spends; 0 only reads usage.
    pub cost: u64,
    /// Decide as the request would be, but write nothing (no charge, no block); within one
    /// `decide_many`, a dry run's later requests see the earlier ones' charges and blocks.
    pub dry_run: bool,
    /// Whether the caller may take the charge back (a [`Receipt`] comes with it).
    pub receipt: bool,
}

impl<'a> DecisionRequest<'a> {
    /// A request that charges `cost` units (no receipt).
    pub fn charge(limits: &'a Arc<LimitSet>, bases: &'a [String], cost: u64) -> Self {
        DecisionRequest {
            limits,
            bases,
            cost,
            dry_run: false,
            receipt: false,
        }
    }
}

/// Settles what a decision charged, for some of its limits: `refund` gives the charge back (a
/// reservation whose outcome is not counted), `confirm` marks it answered and counted (no longer
/// in flight), `unanswered` keeps it counted though no answer came (tallied apart: a refusal it
/// causes tells the window's wait, and starts no block), `reset` gives it back and forgets the
/// limit's answered charges and the block level of its key, keeping the reservations still in
/// flight.
#[derive(Debug, Clone)]
pub struct Settlement {
    /// The limits the decision was made with.
    pub limits: Arc<LimitSet>,
    /// Its key slots' bases.
    pub bases: Vec<String>,
    /// What it charged.
    pub receipt: Receipt,
    /// Limits (indexes into `limits`) whose charge goes back.
    pub refund: Vec<usize>,
    /// Limits whose charge was answered and stays counted.
    pub confirm: Vec<usize>,
    /// Limits whose charge stays counted though no answer came (never confirmed).
    pub unanswered: Vec<usize>,
    /// Limits whose answered count is cleared (the charge itself going back).
    pub reset: Vec<usize>,
    /// Limits whose charge becomes the units given (at most the limit).
    pub settle_to: Vec<(usize, u64)>,
    /// The instant to settle at (µs), when not the store's own clock: the memory store otherwise
    /// settles at the decision's instant, on the clock the decision was made on.
    pub at_us: Option<u64>,
    /// Per key slot, the tag of the value the attempt sent (`~<hex>`) where the slot's key
    /// merges values, else `""`: a confirmation keeps it, a reset forgives only its own.
    pub tags: Vec<String>,
}

impl Settlement {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.refund.is_empty()
            && self.confirm.is_empty()
            && self.unanswered.is_empty()
            && self.reset.is_empty()
            && self.settle_to.is_empty()
    }
}

/// The gateway's clock in microseconds since the epoch.
pub fn local_now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

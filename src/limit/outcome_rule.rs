//! What a limit's charge does when the response arrives: the statuses that count or reset it,
//! and what the answer's end settles.

use crate::config::StatusSet;
use crate::cost::CostFrom;

/// What a limit's charge does when the response arrives.
#[derive(Debug, Clone, Default)]
pub struct OutcomeRule {
    /// Only these statuses count (the others are refunded).
    pub count: Option<StatusSet>,
    /// These statuses clear the count and the block level.
    pub reset: Option<StatusSet>,
    /// Whether a charge kept is confirmed (answered, no longer in flight): a limit that counts
    /// outcomes keeps its reservations counted until then (and a status may reset them), and
    /// on a blocking route a block starts only from answered attempts.
    pub confirms: bool,
    /// What the answer's end (or, for a header, its head) settles.
    pub at_end: Option<AtEnd>,
}

impl OutcomeRule {
    /// Whether an answer with `status` resets the limit (`reset_status`).
    pub fn resets_on(&self, status: u16) -> bool {
        self.reset.as_ref().is_some_and(|r| r.contains(status))
    }
}

/// What an answer settles of a limit beyond its status.
#[derive(Debug, Clone)]
pub enum AtEnd {
    /// The attempt's slot in flight, freed when the answer has been sent.
    Slot,
    /// The cost the answer states.
    Cost(CostFrom),
}

//! One key a route's limits count.

use crate::config::{KeySpec, OnMissingKey};

/// One key a route's limits count: its spec, what a missing part does, and the tag that keeps
/// its Redis keys apart from the other keys' (`slot_tag`).
#[derive(Debug, Clone)]
pub struct KeySlot {
    /// How the key is derived.
    pub spec: KeySpec,
    /// What a missing part does: the limit's `on_missing_key`, else the route's.
    pub on_missing: OnMissingKey,
    /// What follows the route's name in the hash tag.
    pub tag: String,
    /// Whether each attempt's charge keeps which value was sent (a tag of it): the key merges
    /// values and a limit on it has a `reset_status`.
    pub tags_sent: bool,
}

//! One shard of the memory store's keyspace, and the hash tag that picks a key's shard (the keys
//! of one Redis key slot share a shard, so a decision locks only the shards of its own keys).

use std::collections::HashMap;
use std::sync::MutexGuard;

use foldhash::quality::RandomState;

use super::call::{Few, Slot};

/// The shards one call holds locked, each with its index (a decision's keys are few: they stay
/// on the stack).
pub type Guards<'a> = Few<(usize, MutexGuard<'a, Shard>)>;

/// One shard of the keyspace: its keys, and how many operations it saw (for its sweeps).
#[derive(Default)]
pub struct Shard {
    /// Its keys and their values.
    pub keys: HashMap<String, Slot, RandomState>,
    /// Operations so far.
    pub ops: u64,
}

impl Shard {
    /// Drops expired keys; returns how many went.
    pub fn sweep(&mut self, now: u64) -> usize {
        let before = self.keys.len();
        self.keys.retain(|_, s| s.expires_at > now);
        before - self.keys.len()
    }
}

/// The hash tag of a key (between its first `{` and the next `}`), as Redis Cluster hashes it.
pub fn hash_tag(key: &str) -> &str {
    let bytes = key.as_bytes();
    let Some(open) = bytes.iter().position(|&b| b == b'{') else {
        return key;
    };
    match bytes[open + 1..].iter().position(|&b| b == b'}') {
        Some(len) if len > 0 => &key[open + 1..open + 1 + len],
        _ => key,
    }
}

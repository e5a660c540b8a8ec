//! One shard of the memory store's keyspace, and the hash tag that picks a key's shard (the keys
//! of one Redis key slot share a shard, so a decision locks only the shards of its own keys).

use std::collections::HashMap;
use std::sync::MutexGuard;

use foldhash::quality::RandomState;

use super::call::{Few, Slot};

/// How many shards the keyspace has.
pub const SHARDS: usize = 32;

/// The shards one call holds locked, each with its index (a decision's keys are few: they stay
/// on the stack).
pub type Guards<'a> = Few<(usize, MutexGuard<'a, Shard>)>;

/// What a call holds while it works on its keys: its locked shards, and how many live keys it
/// took out of them (they still count as the store's live keys until they are put back).
pub struct Held<'a> {
    /// The locked shards.
    pub guards: Guards<'a>,
    /// Live keys taken out.
    pub taken: usize,
}

impl Held<'_> {
    /// The locked shard `i`.
    pub fn shard(&mut self, i: usize) -> &mut Shard {
        &mut self
            .guards
            .iter_mut()
            .find(|(j, _)| *j == i)
            .expect("locked")
            .1
    }

    /// A member unique to this store, for one decision's first unit: numbered by the count of
    /// operations of the first shard the call holds, which no other call shares, and that
    /// shard's index.
    pub fn member(&self) -> String {
        let (i, shard) = self.guards.first().expect("a call holds a shard");
        let n = shard.ops * SHARDS as u64 + *i as u64;
        ["m", itoa::Buffer::new().format(n), ".1"].concat()
    }
}

/// One shard of the keyspace: its keys, and how many operations it saw (for its sweeps, and to
/// name a decision's members).
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

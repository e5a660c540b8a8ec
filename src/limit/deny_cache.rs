//! The deny cache: once the store says a key must wait T, this instance answers that key's
//! requests with a 429 until T without asking the store again, so a flood on one key costs
//! Redis nothing. Entries are keyed by the decision base (route and key), carry the decision
//! that produced them (the 429 is rebuilt from it, aged), and are dropped on reload or reset.

use std::collections::HashMap;
use std::hash::BuildHasher;

use foldhash::quality::RandomState;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::ExceedMode;
use crate::store::{Decision, Outcome};

const SHARDS: usize = 16;

/// A rejection remembered until it lapses.
#[derive(Debug, Clone)]
pub struct CachedDenial {
    /// When the store decided.
    pub decided_at: Instant,
    /// When the key may be asked about again.
    pub until: Instant,
    /// The store's decision.
    pub decision: Arc<Decision>,
}

impl CachedDenial {
    /// The decision as it stands now.
    pub fn current(&self, now: Instant) -> Decision {
        self.decision
            .aged(now.saturating_duration_since(self.decided_at))
    }
}

/// Shared by every request of the instance; it holds at most `store.max_keys` keys (a full
/// cache skips new entries: they are only a shortcut, the store still decides).
pub struct DenyCache {
    shards: Box<[Mutex<HashMap<String, CachedDenial, RandomState>>]>,
    hasher: RandomState,
    max_per_shard: usize,
}

impl DenyCache {
    /// An empty cache of at most `max_keys` keys.
    pub fn new(max_keys: usize) -> DenyCache {
        DenyCache {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMap::default()))
                .collect(),
            hasher: RandomState::default(),
            max_per_shard: max_keys.div_ceil(SHARDS).max(1),
        }
    }

    fn shard(
        &self,
        base: &str,
    ) -> std::sync::MutexGuard<'_, HashMap<String, CachedDenial, RandomState>> {
        let i = (self.hasher.hash_one(base) as usize) % SHARDS;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live denial for `base`, if any.
    pub fn get(&self, base: &str, now: Instant) -> Option<CachedDenial> {
        let mut shard = self.shard(base);
        match shard.get(base) {
            Some(d) if d.until > now => Some(d.clone()),
            Some(_) => {
                shard.remove(base);
                None
            }
            None => None,
        }
    }

    /// Remembers that `base` must wait `decision.retry_after` from `decided_at`. The wait is
    /// counted from before the store was asked, so the entry lapses no later than the truth.
    pub fn insert(&self, base: &str, decided_at: Instant, decision: Decision) {
        if decision.retry_after < Duration::from_millis(1) {
            return;
        }
        let until = decided_at + decision.retry_after;
        let mut shard = self.shard(base);
        if shard.len() >= self.max_per_shard && !shard.contains_key(base) {
            let now = Instant::now();
            shard.retain(|_, d| d.until > now);
            if shard.len() >= self.max_per_shard {
                return;
            }
        }
        shard.insert(
            base.to_string(),
            CachedDenial {
                decided_at,
                until,
                decision: Arc::new(decision),
            },
        );
    }

    /// Remembers a rejection the store made on a route with this mode. On a `block` route the
    /// exceed that starts the block is remembered as the block itself, so the 429s answered
    /// from the cache after it count as `blocked`, as they would from the store.
    pub fn remember(
        &self,
        base: &str,
        decided_at: Instant,
        decision: &Decision,
        mode: &ExceedMode,
    ) {
        let starts_block =
            decision.outcome == Outcome::Rejected && matches!(mode, ExceedMode::Block(_));
        let cached = Decision {
            outcome: if starts_block {
                Outcome::Blocked
            } else {
                decision.outcome
            },
            receipt: None,
            ..decision.clone()
        };
        self.insert(base, decided_at, cached);
    }

    /// Forgets `base` (an admin reset).
    pub fn remove(&self, base: &str) {
        self.shard(base).remove(base);
    }

    /// Entries still in force (expired ones are dropped on the way): the
    /// `slidegate_deny_cache_entries` gauge, read at scrape time.
    pub fn live_entries(&self, now: Instant) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let mut shard = s.lock().unwrap_or_else(|e| e.into_inner());
                shard.retain(|_, d| d.until > now);
                shard.len()
            })
            .sum()
    }

    /// Forgets everything (a reload).
    pub fn clear(&self) {
        for s in self.shards.iter() {
            s.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
    }
}

//! The deny cache: once the store says a key must wait T, this instance answers that key's
//! requests with a 429 until T without asking the store again, so a flood on one key costs
//! Redis nothing. Entries are keyed by the decision base (route and key), carry the decision
//! that produced them (the 429 is rebuilt from it, aged), and are dropped on reload or reset.
//!
//! A refusal is concluded after the store decided it, and room may be given back in between
//! (an attempt admitted beside it refunded, a reset): the cache remembers, key by key (hashed
//! into a fixed table), when it last forgot, and does not remember a refusal the store was asked
//! for before then. Otherwise the refusal, concluded last, would outlive the room given back.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

use foldhash::quality::RandomState;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::ExceedMode;
use crate::store::{Decision, DecisionRequest, LimitSet, Outcome};
use std::borrow::Cow;

/// The most shards the cache is split into (fewer when `store.max_keys` is below this).
const SHARDS: usize = 16;

/// How many "forgotten at" stamps the cache keeps: keys share them by hash, so a key may now
/// and then not be remembered because another was forgotten (the store then decides it).
const FORGOTTEN_STAMPS: usize = 4096;

/// The longest a refusal of a request decided in parts is remembered: in a Redis Cluster, each
/// node's part charges before it knows the others' answers, so a part may refuse on charges
/// that another part's refusal then takes back (a burst an exhausted per-IP limit refuses whole
/// can fill a phone number's window for a moment). Kept this long, such a refusal shields the
/// store from a flood on the key all the same, and lets the key in again soon after.
pub const PARTS_DENIAL_KEPT: Duration = Duration::from_secs(1);

/// A rejection remembered until it lapses.
#[derive(Debug, Clone)]
pub struct CachedDenial {
    /// When the store decided.
    pub decided_at: Instant,
    /// When the key may be asked about again.
    pub until: Instant,
    /// The store's decision.
    pub decision: Arc<Decision>,
    /// The limits it was decided with: its usages are theirs, in their order.
    pub limits: Arc<LimitSet>,
}

impl CachedDenial {
    /// Whether it can answer a request decided with `limits`: only a request with the same
    /// limits (a route's tier; a rate-limit service request with the same descriptors' limits)
    /// reads its usages in the right order.
    pub fn answers(&self, limits: &Arc<LimitSet>) -> bool {
        Arc::ptr_eq(&self.limits, limits) || *self.limits == **limits
    }

    /// The decision as it stands now.
    pub fn current(&self, now: Instant) -> Decision {
        self.decision
            .aged(now.saturating_duration_since(self.decided_at))
    }
}

/// Shared by every request of the instance; it holds at most `store.max_keys` keys (a full
/// cache skips new entries: they are only a shortcut, the store still decides).
pub struct DenyCache {
    shards: Box<[Shard]>,
    hasher: RandomState,
    /// When each group of keys was last forgotten, in nanoseconds since `epoch` (0: never).
    forgotten: Box<[AtomicU64]>,
    epoch: Instant,
}

/// A part of the cache, with its share of `store.max_keys`.
struct Shard {
    entries: Mutex<HashMap<String, CachedDenial, RandomState>>,
    capacity: usize,
}

impl DenyCache {
    /// An empty cache of at most `max_keys` keys: the shards' shares add up to exactly that.
    pub fn new(max_keys: usize) -> DenyCache {
        let n = SHARDS.min(max_keys).max(1);
        let shards = (0..n).map(|i| Shard {
            entries: Mutex::new(HashMap::default()),
            capacity: max_keys / n + usize::from(i < max_keys % n),
        });
        DenyCache {
            shards: shards.collect(),
            hasher: RandomState::default(),
            forgotten: (0..FORGOTTEN_STAMPS).map(|_| AtomicU64::new(0)).collect(),
            epoch: Instant::now(),
        }
    }

    fn shard_of(&self, base: &str) -> &Shard {
        &self.shards[(self.hasher.hash_one(base) as usize) % self.shards.len()]
    }

    /// The stamp of when `base` (and the keys sharing its stamp) was last forgotten.
    fn forgotten_stamp(&self, base: &str) -> &AtomicU64 {
        let h = self.hasher.hash_one(base) as usize;
        // the shard takes the low bits; the stamp, the next ones
        &self.forgotten[(h / self.shards.len()) % self.forgotten.len()]
    }

    /// Notes that `base` is forgotten now: a refusal asked for before this is not remembered.
    fn note_forgotten(&self, base: &str) {
        let now = self.epoch.elapsed().as_nanos() as u64 + 1;
        self.forgotten_stamp(base).fetch_max(now, Ordering::AcqRel);
    }

    /// Whether `base` was forgotten at or after `asked` (when the store was asked).
    fn forgotten_since(&self, base: &str, asked: Instant) -> bool {
        let asked = asked.saturating_duration_since(self.epoch).as_nanos() as u64 + 1;
        self.forgotten_stamp(base).load(Ordering::Acquire) >= asked
    }

    fn shard(
        &self,
        base: &str,
    ) -> std::sync::MutexGuard<'_, HashMap<String, CachedDenial, RandomState>> {
        self.shard_of(base).lock()
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

    /// Remembers that `base` must wait `decision.retry_after` from `decided_at` (a decision
    /// made with `limits`), for at most `lasts` of it. The wait is counted from before the
    /// store was asked, so the entry lapses no later than the truth; a key forgotten since
    /// then is not remembered (room was given back after the store decided, or while it did).
    fn insert(
        &self,
        base: &str,
        decided_at: Instant,
        decision: Decision,
        limits: &Arc<LimitSet>,
        lasts: Duration,
    ) {
        if lasts < Duration::from_millis(1) {
            return;
        }
        let until = decided_at + lasts;
        let part = self.shard_of(base);
        let mut shard = part.lock();
        // checked under the shard's lock, which a removal stamps before it takes
        if self.forgotten_since(base, decided_at) {
            return;
        }
        if shard.len() >= part.capacity && !shard.contains_key(base) {
            let now = Instant::now();
            shard.retain(|_, d| d.until > now);
            if shard.len() >= part.capacity {
                return;
            }
        }
        shard.insert(
            base.to_string(),
            CachedDenial {
                decided_at,
                until,
                decision: Arc::new(decision),
                limits: limits.clone(),
            },
        );
    }

    /// Remembers a rejection the store made on a route with this mode, for at most
    /// `at_most` when given. On a `block` route the exceed that starts the block is remembered
    /// as the block itself, so the 429s answered from the cache after it count as `blocked`,
    /// as they would from the store.
    pub fn remember(
        &self,
        base: &str,
        decided_at: Instant,
        decision: &Decision,
        mode: &ExceedMode,
        limits: &Arc<LimitSet>,
        at_most: Option<Duration>,
    ) {
        // (a refusal standing on reservations in flight started none: it stays a rejection,
        // cached until the soonest of them is settled)
        let starts_block = decision.starts_blocks(limits) && matches!(mode, ExceedMode::Block(_));
        let cached = Decision {
            outcome: if starts_block {
                Outcome::Blocked
            } else {
                decision.outcome
            },
            receipt: None,
            ..decision.clone()
        };
        let lasts = match (&limits.block, cached.outcome) {
            // A block's refusal is kept until the block ends, not until the windows let the
            // key in: an attempt after the block meets the store, which starts the next one,
            // as every other instance's would. A block this refusal started lasts its whole
            // length; one already serving (started by another instance, or before a reload
            // emptied this cache) only what the store says is left of it.
            (Some(block), Outcome::Blocked) => {
                let block_ends = match starts_block {
                    true => Duration::from_millis(block.length_ms(cached.block_level)),
                    false => cached.block_left,
                };
                cached.retry_after.min(block_ends)
            }
            _ => cached.retry_after,
        };
        let lasts = at_most.map_or(lasts, |at_most| lasts.min(at_most));
        self.insert(base, decided_at, cached, limits, lasts);
    }

    /// Forgets `base` (room given back: a refund, a reset), and any refusal of it the store
    /// was asked for before now and that is not concluded yet.
    pub fn remove(&self, base: &str) {
        self.note_forgotten(base);
        self.shard(base).remove(base);
    }

    /// Forgets `base` if what it holds is a refusal that stood only on reservations in flight:
    /// once one of them is answered, the store may answer otherwise (the block the answered
    /// attempts start, the window's own wait).
    pub fn remove_in_flight(&self, base: &str) {
        self.note_forgotten(base);
        let mut shard = self.shard(base);
        let in_flight = shard.get(base).is_some_and(|d| {
            d.decision.outcome == Outcome::Rejected && !d.decision.refused_on_answers()
        });
        if in_flight {
            shard.remove(base);
        }
    }

    /// Entries still in force (expired ones are dropped on the way): the
    /// `slidegate_deny_cache_entries` gauge, read at scrape time.
    pub fn live_entries(&self, now: Instant) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let mut shard = s.lock();
                shard.retain(|_, d| d.until > now);
                shard.len()
            })
            .sum()
    }

    /// Forgets everything (a reload, resets that may have been missed), refusals the store
    /// was asked for before now and not concluded yet included.
    pub fn clear(&self) {
        let now = self.epoch.elapsed().as_nanos() as u64 + 1;
        for stamp in self.forgotten.iter() {
            stamp.fetch_max(now, Ordering::AcqRel);
        }
        for s in self.shards.iter() {
            s.lock().clear();
        }
    }
}

impl Shard {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, CachedDenial, RandomState>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What the deny cache may remember of a refusal, key by key: each key whose limits refused,
/// with the decision as it concerns that key. With one key that is the whole decision. With
/// several (per phone AND per IP), each key keeps only its own limits' state and its own
/// longest wait: another key of the request says nothing of the next request's, which may
/// carry a different one. A block can outlast a key's own wait; its entry then lapses early and
/// the store answers with the block (a cached refusal must never outlive the truth). A refusal
/// that no limit made (a block alone) with several keys is not remembered: which key is
/// blocked, the decision does not say.
pub(super) fn denials_by_key<'d, 'r>(
    decision: &'d Decision,
    request: DecisionRequest<'r>,
) -> Vec<(&'r String, Cow<'d, Decision>)> {
    let set = request.limits;
    let first = set.slot_of(0);
    if (1..decision.limits.len()).all(|i| set.slot_of(i) == first) {
        return vec![(&request.bases[first], Cow::Borrowed(decision))];
    }
    let mut refusing: Vec<usize> = decision
        .limits
        .iter()
        .enumerate()
        .filter(|(_, u)| u.exceeded())
        .map(|(i, _)| set.slot_of(i))
        .collect();
    refusing.sort_unstable();
    refusing.dedup();
    refusing
        .into_iter()
        .map(|slot| {
            (
                &request.bases[slot],
                Cow::Owned(denial_of_slot(decision, set, slot)),
            )
        })
        .collect()
}

/// `decision` as it concerns key slot `slot` alone: the other slots' limits show nothing used
/// and nothing to wait, and the wait is the slot's own limits' longest.
fn denial_of_slot(decision: &Decision, set: &LimitSet, slot: usize) -> Decision {
    let mut denial = decision.clone();
    let mut wait = Duration::ZERO;
    for (i, usage) in denial.limits.iter_mut().enumerate() {
        if set.slot_of(i) == slot {
            wait = wait.max(usage.retry_after);
        } else {
            usage.used = 0;
            usage.reset = Duration::ZERO;
            usage.retry_after = Duration::ZERO;
        }
    }
    denial.retry_after = wait;
    denial
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::AlgorithmId;
    use crate::store::LimitUsage;

    /// A refusal of one limit of 1 a minute, waiting `wait`.
    fn refusal(wait: Duration) -> Decision {
        Decision {
            outcome: Outcome::Rejected,
            retry_after: wait,
            limits: vec![LimitUsage {
                used: 1,
                limit: 1,
                reset: wait,
                retry_after: wait,
                in_flight: false,
            }],
            decided_at_us: 0,
            block_level: 0,
            block_left: Duration::ZERO,
            receipt: None,
            approximate: false,
        }
    }

    /// However `store.max_keys` divides among the shards, the cache holds exactly that many
    /// keys once more keys than that are refused.
    #[test]
    fn the_cache_holds_at_most_max_keys() {
        let set = Arc::new(LimitSet::simple(&[(
            "per-minute",
            1,
            60_000_000,
            AlgorithmId::SLIDING_LOG,
        )]));
        let decision = refusal(Duration::from_secs(60));
        for max_keys in [1, 2, 15, 17, 100, 1000] {
            let cache = DenyCache::new(max_keys);
            let now = Instant::now();
            for k in 0..20 * max_keys {
                let key = format!("route|{k}");
                cache.remember(&key, now, &decision, &ExceedMode::Reject, &set, None);
            }
            assert_eq!(cache.live_entries(now), max_keys, "max_keys {max_keys}");
        }
    }

    /// A refusal the store was asked for before its key was forgotten (an attempt beside it
    /// refunded) is not remembered; one asked for after is.
    #[test]
    fn a_refusal_asked_for_before_a_refund_is_not_remembered() {
        let set = Arc::new(LimitSet::simple(&[(
            "per-minute",
            1,
            60_000_000,
            AlgorithmId::SLIDING_LOG,
        )]));
        let decision = refusal(Duration::from_secs(60));
        let cache = DenyCache::new(100);
        let asked = Instant::now();
        cache.remove("route|k");
        cache.remember("route|k", asked, &decision, &ExceedMode::Reject, &set, None);
        assert!(cache.get("route|k", Instant::now()).is_none());
        let asked = Instant::now();
        cache.remember("route|k", asked, &decision, &ExceedMode::Reject, &set, None);
        assert!(cache.get("route|k", Instant::now()).is_some());
    }
}

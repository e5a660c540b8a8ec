//! The embedded store (`store.backend = "memory"`, and the `on_error = "local"` fallback): a
//! small keyspace laid out as Redis lays it out, on which [`call`] runs the steps of the
//! script, so both stores answer alike. Keys are sharded by their hash tag, so the keys of one
//! key slot share a shard and a decision locks only the shards of its own keys.
//!
//! Bounded: it never holds more than `max_keys` live keys. Expired keys are dropped first; when
//! it is full of live keys, a limit whose key it does not hold is counted in that limit's
//! overflow sketch ([`overflow`]), which can only over-count, while keys it holds keep exact
//! counts ([`full`]): flooding it with new keys frees no one's quota and opens no limit.

mod blocks;
mod call;
mod full;
mod overflow;
mod refused;
mod settle;
mod shard;

use std::hash::BuildHasher;

use foldhash::quality::RandomState;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub use call::Marker;
use call::{Keys, Slot, Value};
use shard::{hash_tag, Guards, Held, Shard, SHARDS};

use super::refused::{refused_entries, Refused};
use super::{
    local_now_us, Decision, DecisionRequest, LimitSet, Receipt, ReceiptPart, Settlement, StoreError,
};

/// A shard drops its expired keys once every this many operations.
const SWEEP_EVERY: u64 = 4096;
/// A full store looks through every shard for expired keys at most this often (µs).
const FULL_SWEEP_EVERY_US: u64 = 100_000;

/// In-process limiter state, cheap to clone (all clones share it).
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

struct Inner {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    max_keys: usize,
    live: AtomicUsize,
    last_full_sweep: AtomicU64,
    /// Each route's refusals now (`/admin/blocked`).
    refused: refused::RefusedIndex,
    /// Where limits count the keys the table has no room for, and keep their blocks.
    spill: full::Spill,
}

impl MemoryStore {
    /// An empty store holding at most `max_keys` live keys.
    pub fn new(max_keys: usize) -> MemoryStore {
        MemoryStore {
            inner: Arc::new(Inner {
                shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
                hasher: RandomState::default(),
                max_keys,
                live: AtomicUsize::new(0),
                last_full_sweep: AtomicU64::new(0),
                refused: Default::default(),
                spill: full::Spill::new(max_keys),
            }),
        }
    }

    fn shard_of(&self, key: &str) -> usize {
        (self.inner.hasher.hash_one(hash_tag(key)) as usize) % SHARDS
    }

    /// Locks the shards of `keys` (in shard order, so two calls never wait on each other in a
    /// cycle) and takes the keys out of them. They still count as live until [`Self::put_back`]
    /// says which came back, so a call that keeps its keys writes no counter the workers share.
    fn take(&self, keys: &[String], now: u64) -> (Held<'_>, Keys) {
        let shard_of: call::Few<usize> = keys.iter().map(|k| self.shard_of(k)).collect();
        let mut indexes = shard_of.clone();
        indexes.sort_unstable();
        indexes.dedup();
        let guards: Guards<'_> = indexes
            .into_iter()
            .map(|i| {
                let mut shard = self.inner.shards[i]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                shard.ops += 1;
                if shard.ops.is_multiple_of(SWEEP_EVERY) {
                    let gone = shard.sweep(now);
                    self.inner.live.fetch_sub(gone, Ordering::Relaxed);
                }
                (i, shard)
            })
            .collect();
        let mut taken = Keys::with_capacity_and_hasher(keys.len(), Default::default());
        let mut held = Held { guards, taken: 0 };
        for (key, &i) in keys.iter().zip(&shard_of) {
            if taken.contains_key(key) {
                continue;
            }
            // The key's own string moves along with its value (no copy for a key it holds).
            let (owned, slot) = match held.shard(i).keys.remove_entry(key) {
                Some((owned, slot)) if slot.expires_at > now => {
                    held.taken += 1;
                    (owned, Some(slot))
                }
                Some((owned, _)) => {
                    self.inner.live.fetch_sub(1, Ordering::Relaxed);
                    (owned, None)
                }
                None => (key.clone(), None),
            };
            taken.insert(owned, slot);
        }
        (held, taken)
    }

    /// Puts the keys of a call back into their (still locked) shards, and counts the keys it
    /// made or ended.
    fn put_back(&self, held: &mut Held<'_>, keys: Keys) {
        let mut back = 0;
        for (key, slot) in keys {
            let Some(slot) = slot else { continue };
            held.shard(self.shard_of(&key)).keys.insert(key, slot);
            back += 1;
        }
        let live = &self.inner.live;
        if back > held.taken {
            live.fetch_add(back - held.taken, Ordering::Relaxed);
        } else if back < held.taken {
            live.fetch_sub(held.taken - back, Ordering::Relaxed);
        }
        held.taken = back;
    }

    /// Whether `more` keys fit; when the store is full, expired keys anywhere are dropped first
    /// (every shard but the ones this call holds, at most every 100 ms).
    fn room_for(&self, more: usize, held: &[(usize, MutexGuard<'_, Shard>)], now: u64) -> bool {
        if more == 0 || self.inner.live.load(Ordering::Relaxed) + more <= self.inner.max_keys {
            return true;
        }
        let last = self.inner.last_full_sweep.load(Ordering::Relaxed);
        if now >= last + FULL_SWEEP_EVERY_US
            && self
                .inner
                .last_full_sweep
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            for (i, shard) in self.inner.shards.iter().enumerate() {
                if held.iter().any(|(j, _)| *j == i) {
                    continue;
                }
                let gone = shard.lock().unwrap_or_else(|e| e.into_inner()).sweep(now);
                self.inner.live.fetch_sub(gone, Ordering::Relaxed);
            }
        }
        self.inner.live.load(Ordering::Relaxed) + more <= self.inner.max_keys
    }

    /// Whether a charging decision on `keys` (as taken) cannot be made in the table alone: it
    /// needs keys there is no room for, or the overflow sketch counts one it does not hold.
    /// While the table has room and no limit ever overflowed, this costs what it always did.
    fn overflows(
        &self,
        keys: &Keys,
        set: &LimitSet,
        keys_of: &[String],
        held: &[(usize, MutexGuard<'_, Shard>)],
        now: u64,
    ) -> bool {
        let absent = keys.values().filter(|s| s.is_none()).count();
        absent > 0
            && (!self.room_for(absent, held, now)
                || full::counts_any(&self.inner.spill, keys, set, keys_of, now))
    }

    /// Decides one request at `now_us` (the gateway's clock when `None`).
    pub fn decide(
        &self,
        request: DecisionRequest<'_>,
        now_us: Option<u64>,
    ) -> Result<Decision, StoreError> {
        let now = now_us.unwrap_or_else(local_now_us);
        let set = request.limits;
        if set.limits.is_empty() {
            return Ok(Decision::unlimited());
        }
        if request.dry_run {
            let mut scratch = Keys::default();
            return self.decide_dry(&mut scratch, request, now);
        }
        let keys_of = set.keys(request.bases);
        let (mut held, mut keys) = self.take(&keys_of, now);
        let commits = request.cost > 0;
        let member = held.member();
        let overflows = commits && self.overflows(&keys, set, &keys_of, &held.guards, now);
        let charged = full::Sketch::Charged { member: &member };
        let (reply, in_sketch) =
            self.decide_keys(&mut keys, &request, &keys_of, overflows, charged, now);
        self.put_back(&mut held, keys);
        drop(held);
        let mut decision = Decision::from_reply(set, &reply, now)?;
        decision.approximate = in_sketch.counted;
        if let Some(refusals) = &set.refusals {
            let entries = refused_entries(set, request.bases, request.cost, &decision);
            self.inner.refused.note(&refusals.index, &entries, now);
        }
        if decision.allowed() && commits && request.receipt {
            decision.receipt = Some(Receipt {
                parts: vec![ReceiptPart {
                    slot: None,
                    member,
                    decided_at_us: now,
                    sketched: in_sketch.charged,
                }],
                cost: request.cost,
            });
        }
        Ok(decision)
    }

    /// Decides `request` on `keys` (taken for `keys_of`): in the overflow sketch when it
    /// `overflows`, by the table alone otherwise.
    fn decide_keys(
        &self,
        keys: &mut Keys,
        request: &DecisionRequest<'_>,
        keys_of: &[String],
        overflows: bool,
        sketch_use: full::Sketch<'_>,
        now: u64,
    ) -> (Vec<i64>, full::InSketch) {
        let (set, cost) = (request.limits, request.cost);
        if overflows {
            return full::decide(&self.inner.spill, keys, set, keys_of, cost, sketch_use, now);
        }
        let reply = call::decide(keys, set, keys_of, cost, sketch_use.member(), 1, now);
        (reply, full::InSketch::default())
    }

    /// Decides requests in order, all at one instant, as one script call does. A dry run's
    /// decisions share one scratch copy of the keys they touch, so each sees the ones before it.
    pub fn decide_many(
        &self,
        requests: &[DecisionRequest<'_>],
        now_us: Option<u64>,
    ) -> Vec<Result<Decision, StoreError>> {
        let now = now_us.unwrap_or_else(local_now_us);
        let mut scratch = Keys::default();
        requests
            .iter()
            .map(|r| match r.dry_run {
                true => self.decide_dry(&mut scratch, *r, now),
                false => self.decide(*r, Some(now)),
            })
            .collect()
    }

    /// Decides a dry run's request on `scratch`, copies of the keys taken on first use: made
    /// exactly as it would be, charging and blocking the copies only (a key counted in the
    /// overflow sketch is decided there, the sketch only read: dry runs of one batch do not see
    /// each other's units there).
    fn decide_dry(
        &self,
        scratch: &mut Keys,
        request: DecisionRequest<'_>,
        now: u64,
    ) -> Result<Decision, StoreError> {
        let set = request.limits;
        if set.limits.is_empty() {
            return Ok(Decision::unlimited());
        }
        let keys_of = set.keys(request.bases);
        let missing: Vec<String> = keys_of
            .iter()
            .filter(|k| !scratch.contains_key(*k))
            .cloned()
            .collect();
        if !missing.is_empty() {
            let (mut held, keys) = self.take(&missing, now);
            for (key, slot) in &keys {
                scratch.insert(key.clone(), slot.as_ref().map(call::Slot::duplicate));
            }
            self.put_back(&mut held, keys);
        }
        // this request's keys, moved out of the scratch and back: a key the table has no room
        // for is decided in the overflow sketch, as the call would be, which is only read
        let mut own: Keys = (keys_of.iter())
            .filter_map(|k| scratch.remove_entry(k))
            .collect();
        let overflows = request.cost > 0 && self.overflows(&own, set, &keys_of, &[], now);
        let read = full::Sketch::Read;
        let (reply, in_sketch) =
            self.decide_keys(&mut own, &request, &keys_of, overflows, read, now);
        scratch.extend(own);
        let mut decision = Decision::from_reply(set, &reply, now)?;
        decision.approximate = in_sketch.counted;
        Ok(decision)
    }

    /// Applies a settlement: refunds, confirmations, charges kept without an answer and resets
    /// of one decision's limits. Keys
    /// expire on the clock the decision was made on (its instant), as they were written, and the
    /// settlement is applied at that instant.
    pub fn settle(&self, settlement: &Settlement) {
        let set = &settlement.limits;
        let keys_of = set.keys(&settlement.bases);
        let parts = &settlement.receipt.parts;
        let now = settlement.at_us.unwrap_or_else(|| {
            parts
                .iter()
                .map(|p| p.decided_at_us)
                .max()
                .unwrap_or_else(local_now_us)
        });
        let (mut held, mut keys) = self.take(&keys_of, now);
        for part in &settlement.receipt.parts {
            settle::apply(&mut keys, settlement, &keys_of, part, now);
            full::settle(
                &self.inner.spill.counts,
                settlement,
                &keys_of,
                &part.sketched,
                now,
            );
        }
        self.put_back(&mut held, keys);
    }

    /// Forgets these keys (an admin reset); answers how many were live.
    pub fn forget(&self, keys: &[String]) -> usize {
        let (mut held, taken) = self.take(keys, local_now_us());
        self.put_back(&mut held, Keys::default());
        taken.values().filter(|slot| slot.is_some()).count()
    }

    /// How many of these keys are live.
    pub fn held(&self, keys: &[String]) -> usize {
        let now = local_now_us();
        keys.iter()
            .filter(|key| {
                let shard = self.inner.shards[self.shard_of(key)]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                shard.keys.get(*key).is_some_and(|s| s.expires_at > now)
            })
            .count()
    }

    /// The block marker at `key`, if one is live.
    pub fn marker(&self, key: &str) -> Option<Marker> {
        let shard = self.inner.shards[self.shard_of(key)]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match shard.keys.get(key) {
            Some(Slot {
                value: Value::Marker(m),
                expires_at,
            }) if *expires_at > local_now_us() => Some(m.clone()),
            _ => None,
        }
    }

    /// Records refusals in the refusal index `index` (the twin of what a cluster's gateway
    /// writes after the call).
    pub fn note_refused(&self, index: &str, entries: &[Refused]) {
        self.inner.refused.note(index, entries, local_now_us());
    }

    /// The refusals of `index` that have not ended, latest-ending first, at most `n`: each
    /// member, its end and its instant (µs).
    pub fn refused_now(&self, index: &str, n: usize) -> Vec<crate::store::refused::Recorded> {
        self.inner.refused.current(index, n, local_now_us())
    }

    /// Removes `members` from the refusal index `index`.
    pub fn forget_refused(&self, index: &str, members: &[String]) {
        self.inner.refused.forget(index, members);
    }

    /// Live keys held now.
    pub fn live_keys(&self) -> usize {
        self.inner.live.load(Ordering::Relaxed)
    }
}

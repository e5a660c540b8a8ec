//! The embedded store (`store.backend = "memory"`, and the `on_error = "local"` fallback): the
//! scripts' algorithms run in process, step for step, and answer in the same reply layout.
//!
//! One decide skeleton ([`decide_entry`], the twin of `lua/decide.lua`) serves both algorithms;
//! each algorithm is a [`LimitState`] variant with the same operations as its Lua file (`used`,
//! `fits`, `wait`, `charge`, `reset`), written with the same floating-point steps so both stores
//! agree to the microsecond. State is sharded by the key's storage base, so one decision locks
//! one shard, and expired state is swept as a shard is used, as Redis expires idle keys.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};

use super::{local_now_us, Decision, DecisionRequest, LimitSet};
use crate::config::Algorithm;

const SHARDS: usize = 32;
const SWEEP_EVERY: u64 = 4096;

/// In-process limiter state, cheap to clone (all clones share it).
#[derive(Clone)]
pub struct MemoryStore {
    shards: Arc<[Mutex<Shard>]>,
    hasher: RandomState,
}

#[derive(Default)]
struct Shard {
    entries: HashMap<String, Entry>,
    ops: u64,
}

/// Everything kept for one storage base: a state per (limit name, algorithm), like the Redis
/// keys `<base>:<limit>` and `<base>:<limit>#swc`, and the block marker `<base>#block`.
#[derive(Default)]
struct Entry {
    slots: Vec<Slot>,
    block: Option<Block>,
}

struct Slot {
    name: String,
    state: LimitState,
    /// When Redis would have expired the key (PEXPIRE after each charge).
    expires_at: u64,
}

#[derive(Clone, Copy)]
struct Block {
    worst: usize,
    until: u64,
}

/// One limit's stored state, by algorithm.
enum LimitState {
    /// Entry times in ascending order (`sliding_log.lua`'s sorted set).
    Log(VecDeque<u64>),
    /// `sliding_window_counter.lua`'s hash: window index, its count, the previous count, length.
    Counter { w: u64, c: u64, p: u64, l: u64 },
}

/// The counter's view at an instant, as `load_state` computes it in Lua.
struct CounterView {
    index: u64,
    elapsed: f64,
    window: f64,
    cur: f64,
    prev: f64,
}

impl CounterView {
    /// The estimate times the window (`scaled` in Lua): whole, so compared without tolerance.
    fn scaled(&self) -> f64 {
        self.prev * (self.window - self.elapsed) + self.cur * self.window
    }

    fn used(&self) -> i64 {
        (self.scaled() / self.window).ceil() as i64
    }

    fn fits(&self, limit: u64, cost: u64) -> bool {
        self.scaled() + cost as f64 * self.window <= limit as f64 * self.window
    }

    /// Time from now until the estimate is at most `target` (`time_until` in Lua).
    fn time_until(&self, target: f64) -> i64 {
        let (w, e) = (self.window, self.elapsed);
        if target < 0.0 {
            return w as i64;
        }
        if self.cur <= target {
            if self.prev == 0.0 {
                return 0;
            }
            let t = (w - e) - (target - self.cur) * w / self.prev;
            return if t < 0.0 { 0 } else { t.ceil() as i64 };
        }
        ((w - e) + w * (self.cur - target) / self.cur).ceil() as i64
    }
}

impl LimitState {
    fn new(algorithm: Algorithm) -> LimitState {
        match algorithm {
            Algorithm::SlidingLog => LimitState::Log(VecDeque::new()),
            Algorithm::SlidingWindowCounter => LimitState::Counter {
                w: 0,
                c: 0,
                p: 0,
                l: 0,
            },
        }
    }

    fn algorithm(&self) -> Algorithm {
        match self {
            LimitState::Log(_) => Algorithm::SlidingLog,
            LimitState::Counter { .. } => Algorithm::SlidingWindowCounter,
        }
    }

    /// `load_state`: the log drops entries that left the window; the counter is only read.
    fn load(&mut self, window: u64, now: u64) {
        if let LimitState::Log(entries) = self {
            let horizon = now as i64 - window as i64;
            while entries.front().is_some_and(|&t| t as i64 <= horizon) {
                entries.pop_front();
            }
        }
    }

    fn counter(&self, window: u64, now: u64) -> CounterView {
        let LimitState::Counter { w, c, p, l } = *self else {
            unreachable!("counter view of a log")
        };
        let index = now / window;
        let (cur, prev) = if l == window && w == index {
            (c, p)
        } else if l == window && w + 1 == index {
            (0, c)
        } else {
            (0, 0)
        };
        CounterView {
            index,
            elapsed: (now - index * window) as f64,
            window: window as f64,
            cur: cur as f64,
            prev: prev as f64,
        }
    }

    fn used(&self, window: u64, now: u64) -> i64 {
        match self {
            LimitState::Log(entries) => entries.len() as i64,
            LimitState::Counter { .. } => self.counter(window, now).used(),
        }
    }

    fn fits(&self, limit: u64, window: u64, cost: u64, now: u64) -> bool {
        match self {
            LimitState::Log(entries) => entries.len() as u64 + cost <= limit,
            LimitState::Counter { .. } => self.counter(window, now).fits(limit, cost),
        }
    }

    fn wait(&self, limit: u64, window: u64, cost: u64, now: u64) -> i64 {
        let wait = match self {
            LimitState::Log(_) if cost > limit => window as i64,
            LimitState::Log(entries) => {
                let rank = (entries.len() as u64 + cost - limit - 1) as usize;
                entries[rank] as i64 + window as i64 - now as i64
            }
            LimitState::Counter { .. } => self
                .counter(window, now)
                .time_until(limit as f64 - cost as f64),
        };
        wait.max(1)
    }

    fn charge(&mut self, cost: u64, window: u64, now: u64) {
        match self {
            LimitState::Log(entries) => {
                // Sorted even when callers pass times out of order, as a sorted set is.
                let at = entries.partition_point(|&t| t <= now);
                for _ in 0..cost {
                    entries.insert(at, now);
                }
            }
            LimitState::Counter { .. } => {
                let view = self.counter(window, now);
                *self = LimitState::Counter {
                    w: view.index,
                    c: view.cur as u64 + cost,
                    p: view.prev as u64,
                    l: window,
                };
            }
        }
    }

    fn reset(&self, window: u64, now: u64) -> i64 {
        match self {
            LimitState::Log(entries) => match entries.front() {
                None => 0,
                Some(&oldest) => (oldest as i64 + window as i64 - now as i64).max(0),
            },
            LimitState::Counter { .. } => {
                let view = self.counter(window, now);
                let used = view.used();
                if used <= 0 {
                    0
                } else {
                    view.time_until((used - 1) as f64)
                }
            }
        }
    }

    /// How long Redis keeps the key after a charge: one window for a log, two for a counter.
    fn ttl(&self, window: u64) -> u64 {
        match self {
            LimitState::Log(_) => window,
            LimitState::Counter { .. } => 2 * window,
        }
    }
}

impl Entry {
    /// The slot of a limit, created empty when absent or expired, loaded at `now`.
    fn slot(&mut self, name: &str, algorithm: Algorithm, window: u64, now: u64) -> usize {
        let found = self
            .slots
            .iter()
            .position(|s| s.name == name && s.state.algorithm() == algorithm);
        let i = match found {
            Some(i) if self.slots[i].expires_at > now => i,
            Some(i) => {
                self.slots[i].state = LimitState::new(algorithm);
                i
            }
            None => {
                self.slots.push(Slot {
                    name: name.to_string(),
                    state: LimitState::new(algorithm),
                    expires_at: 0,
                });
                self.slots.len() - 1
            }
        };
        self.slots[i].state.load(window, now);
        i
    }

    fn live(&self, now: u64) -> bool {
        self.slots.iter().any(|s| s.expires_at > now) || self.block.is_some_and(|b| b.until > now)
    }
}

/// One decision, the twin of the loop body of `lua/decide.lua`: the block, then every limit,
/// then all charged or none. Returns the reply in the scripts' layout.
fn decide_entry(entry: &mut Entry, set: &LimitSet, cost: u64, now: u64) -> Vec<i64> {
    let slots: Vec<usize> = set
        .limits
        .iter()
        .map(|l| entry.slot(&l.name, l.algorithm, l.window_us, now))
        .collect();
    let reply = |entry: &Entry, code: i64, retry: i64, per_limit: &[i64]| {
        let mut out = Vec::with_capacity(Decision::reply_len(set));
        out.extend([code, retry]);
        for (i, l) in set.limits.iter().enumerate() {
            let state = &entry.slots[slots[i]].state;
            out.extend([
                state.used(l.window_us, now),
                state.reset(l.window_us, now),
                per_limit[i],
            ]);
        }
        out
    };
    let mut per_limit = vec![0i64; set.limits.len()];
    if set.block_ms > 0 {
        if let Some(b) = entry.block.filter(|b| b.until > now) {
            let remaining = (b.until - now) as i64;
            if let Some(slot) = per_limit.get_mut(b.worst) {
                *slot = remaining;
            }
            return reply(entry, 2, remaining, &per_limit);
        }
    }
    let (mut retry, mut worst) = (0i64, 0usize);
    for (i, l) in set.limits.iter().enumerate() {
        let state = &entry.slots[slots[i]].state;
        if !state.fits(l.limit, l.window_us, cost, now) {
            let wait = state.wait(l.limit, l.window_us, cost, now);
            per_limit[i] = wait;
            if wait > retry {
                retry = wait;
                worst = i;
            }
        }
    }
    if retry > 0 {
        if set.block_ms > 0 && cost > 0 {
            entry.block = Some(Block {
                worst,
                until: now + set.block_ms * 1000,
            });
            retry = retry.max(set.block_ms as i64 * 1000);
            per_limit[worst] = retry;
        }
        return reply(entry, 0, retry, &per_limit);
    }
    if cost > 0 {
        for (i, l) in set.limits.iter().enumerate() {
            let slot = &mut entry.slots[slots[i]];
            slot.state.charge(cost, l.window_us, now);
            slot.expires_at = now + slot.state.ttl(l.window_us);
        }
    }
    reply(entry, 1, 0, &per_limit)
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            hasher: RandomState::new(),
        }
    }

    fn shard(&self, base: &str) -> std::sync::MutexGuard<'_, Shard> {
        let i = (self.hasher.hash_one(base) as usize) % SHARDS;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Decides one request at `now_us` (the gateway's clock when `None`).
    pub fn decide(&self, request: DecisionRequest<'_>, now_us: Option<u64>) -> Decision {
        let now = now_us.unwrap_or_else(local_now_us);
        if request.limits.limits.is_empty() {
            return Decision::unlimited();
        }
        let mut shard = self.shard(request.base);
        shard.sweep_now_and_then(now);
        let reply = match shard.entries.get_mut(request.base) {
            Some(entry) => decide_entry(entry, request.limits, request.cost, now),
            None => {
                let mut entry = Entry::default();
                let reply = decide_entry(&mut entry, request.limits, request.cost, now);
                if entry.live(now) {
                    shard.entries.insert(request.base.to_string(), entry);
                }
                reply
            }
        };
        drop(shard);
        Decision::from_reply(request.limits, &reply, now)
            .expect("the memory store replies in the script layout")
    }

    /// Decides requests in order, all at one instant, as one script call does.
    pub fn decide_many(
        &self,
        requests: &[DecisionRequest<'_>],
        now_us: Option<u64>,
    ) -> Vec<Decision> {
        let now = now_us.unwrap_or_else(local_now_us);
        requests
            .iter()
            .map(|r| self.decide(*r, Some(now)))
            .collect()
    }

    /// Forgets a key's counts and block (an admin reset).
    pub fn reset(&self, base: &str) {
        self.shard(base).entries.remove(base);
    }

    /// Number of keys with live state (for tests of expiry).
    pub fn len(&self) -> usize {
        let now = local_now_us();
        self.shards
            .iter()
            .map(|s| {
                let s = s.lock().unwrap_or_else(|e| e.into_inner());
                s.entries.values().filter(|e| e.live(now)).count()
            })
            .sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Shard {
    fn sweep_now_and_then(&mut self, now: u64) {
        self.ops += 1;
        if self.ops % SWEEP_EVERY == 0 {
            self.entries.retain(|_, e| e.live(now));
        }
    }
}

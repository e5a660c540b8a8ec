//! The embedded store (`store.backend = "memory"`, and the `on_error = "local"` fallback): the
//! scripts' algorithms run in process, step for step, answering in the same reply layout.
//! State is sharded by decision base, so one decision locks one shard, and expired state is swept
//! as the shard is used, so idle keys vanish as they do in Redis.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};

use super::{local_now_us, window_us, Decision, DecisionInput, Reply};
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
    logs: HashMap<String, Log>,
    counters: HashMap<String, Counter>,
    blocks: HashMap<String, Block>,
    ops: u64,
}

/// A sliding log: entry times in ascending order.
struct Log {
    entries: VecDeque<u64>,
    expires_at: u64,
}

/// A sliding-window counter: the current fixed window and the previous one's count.
#[derive(Clone, Copy)]
struct Counter {
    index: u64,
    current: u64,
    previous: u64,
    window: u64,
    expires_at: u64,
}

struct Block {
    limit_index: usize,
    until: u64,
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

    /// Decides one request exactly as the route's script would.
    pub fn decide(&self, input: DecisionInput<'_>) -> Decision {
        let now = input.now_us.unwrap_or_else(local_now_us);
        let keys = input.keys();
        let mut shard = self.shard(input.base);
        shard.sweep_now_and_then(now);
        let reply = match input.route.algorithm {
            Algorithm::SlidingLog => shard.sliding_log(&input, &keys, now),
            Algorithm::SlidingWindowCounter => shard.sliding_window_counter(&input, &keys, now),
        };
        drop(shard);
        Decision::from_reply(&input.route.limits, &reply)
            .expect("memory store replies in the script layout")
    }

    /// Removes these keys (an admin reset).
    pub fn delete(&self, keys: &[String]) {
        let Some(first) = keys.first() else { return };
        // Every key of one decision starts with its base (up to the hash tag's `}`, which key
        // material never contains), and the base picks the shard.
        let base = first.find('}').map_or(first.as_str(), |i| &first[..=i]);
        let mut shard = self.shard(base);
        for k in keys {
            shard.logs.remove(k);
            shard.counters.remove(k);
            shard.blocks.remove(k);
        }
    }

    /// Number of live keys (for tests of expiry).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = s.lock().unwrap_or_else(|e| e.into_inner());
                s.logs.len() + s.counters.len() + s.blocks.len()
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
        if self.ops % SWEEP_EVERY != 0 {
            return;
        }
        self.logs.retain(|_, l| l.expires_at > now);
        self.counters.retain(|_, c| c.expires_at > now);
        self.blocks.retain(|_, b| b.until > now);
    }

    /// The active block of this decision, as `(limit index, remaining µs)`.
    fn active_block(&mut self, key: &str, block_ms: u64, now: u64) -> Option<(usize, u64)> {
        if block_ms == 0 {
            return None;
        }
        match self.blocks.get(key) {
            Some(b) if b.until > now => Some((b.limit_index, b.until - now)),
            Some(_) => {
                self.blocks.remove(key);
                None
            }
            None => None,
        }
    }

    fn start_block(&mut self, key: &str, limit_index: usize, block_ms: u64, now: u64) {
        self.blocks.insert(
            key.to_string(),
            Block {
                limit_index,
                until: now + block_ms * 1000,
            },
        );
    }

    fn sliding_log(&mut self, input: &DecisionInput<'_>, keys: &[String], now: u64) -> Reply {
        let limits = &input.route.limits;
        let n = limits.len();
        let cost = input.cost;
        let block_ms = input.block_ms();
        let mut used = Vec::with_capacity(n);
        for (i, l) in limits.iter().enumerate() {
            let window = window_us(l);
            let count = match self.logs.get_mut(&keys[i]) {
                Some(log)
                    if log.expires_at > now
                        || log.entries.back().is_some_and(|&t| t + window > now) =>
                {
                    while log.entries.front().is_some_and(|&t| t + window <= now) {
                        log.entries.pop_front();
                    }
                    log.entries.len() as u64
                }
                Some(_) => {
                    self.logs.remove(&keys[i]);
                    0
                }
                None => 0,
            };
            used.push(count);
        }
        let reset = |shard: &Shard, i: usize, used: u64| -> i64 {
            if used == 0 {
                return 0;
            }
            let oldest = shard
                .logs
                .get(&keys[i])
                .and_then(|l| l.entries.front().copied())
                .unwrap_or(now);
            (oldest as i64 + window_us(&limits[i]) as i64 - now as i64).max(0)
        };
        let reply =
            |shard: &Shard, code: i64, retry: i64, used: &[u64], per_limit: &[i64]| -> Reply {
                let mut out = Vec::with_capacity(2 + 3 * n);
                out.extend([code, retry]);
                for i in 0..n {
                    out.extend([used[i] as i64, reset(shard, i, used[i]), per_limit[i]]);
                }
                out
            };
        if let Some((worst, remaining)) = self.active_block(&keys[n], block_ms, now) {
            let mut per_limit = vec![0; n];
            per_limit[worst.min(n - 1)] = remaining as i64;
            return reply(self, 2, remaining as i64, &used, &per_limit);
        }
        let mut per_limit = vec![0i64; n];
        let (mut retry, mut worst) = (0i64, 0usize);
        for (i, l) in limits.iter().enumerate() {
            let over = used[i] + cost;
            if over <= l.limit {
                continue;
            }
            let over = over - l.limit;
            let window = window_us(l) as i64;
            let wait = if cost > l.limit {
                window
            } else {
                let entry = self.logs[&keys[i]].entries[(over - 1) as usize] as i64;
                (entry + window - now as i64).max(1)
            };
            per_limit[i] = wait;
            if wait > retry {
                retry = wait;
                worst = i;
            }
        }
        if retry > 0 {
            if block_ms > 0 && cost > 0 {
                self.start_block(&keys[n], worst, block_ms, now);
                retry = retry.max(block_ms as i64 * 1000);
                per_limit[worst] = retry;
            }
            return reply(self, 0, retry, &used, &per_limit);
        }
        if cost > 0 {
            for (i, l) in limits.iter().enumerate() {
                let log = self.logs.entry(keys[i].clone()).or_insert_with(|| Log {
                    entries: VecDeque::new(),
                    expires_at: 0,
                });
                // Keep entries sorted even when callers pass times out of order.
                let at = log.entries.partition_point(|&t| t <= now);
                for _ in 0..cost {
                    log.entries.insert(at, now);
                }
                log.expires_at = now + window_us(l);
                used[i] += cost;
            }
        }
        reply(self, 1, 0, &used, &per_limit)
    }

    fn sliding_window_counter(
        &mut self,
        input: &DecisionInput<'_>,
        keys: &[String],
        now: u64,
    ) -> Reply {
        let limits = &input.route.limits;
        let n = limits.len();
        let cost = input.cost as f64;
        let block_ms = input.block_ms();
        let mut state = Vec::with_capacity(n);
        for (i, l) in limits.iter().enumerate() {
            let window = window_us(l);
            let index = now / window;
            let elapsed = now - index * window;
            let (mut current, mut previous) = (0u64, 0u64);
            if let Some(c) = self
                .counters
                .get(&keys[i])
                .filter(|c| c.expires_at > now && c.window == window)
            {
                if c.index == index {
                    (current, previous) = (c.current, c.previous);
                } else if c.index + 1 == index {
                    previous = c.current;
                }
            }
            state.push((window, index, elapsed, current, previous));
        }
        let estimate = |s: &(u64, u64, u64, u64, u64)| {
            let (w, _, e, c, p) = *s;
            p as f64 * (w - e) as f64 / w as f64 + c as f64
        };
        let reply = |code: i64,
                     retry: i64,
                     state: &[(u64, u64, u64, u64, u64)],
                     per_limit: &[i64]|
         -> Reply {
            let mut out = Vec::with_capacity(2 + 3 * n);
            out.extend([code, retry]);
            for i in 0..n {
                let (w, _, e, _, _) = state[i];
                out.extend([
                    (estimate(&state[i]) - 1e-9).ceil() as i64,
                    (w - e) as i64,
                    per_limit[i],
                ]);
            }
            out
        };
        if let Some((worst, remaining)) = self.active_block(&keys[n], block_ms, now) {
            let mut per_limit = vec![0; n];
            per_limit[worst.min(n - 1)] = remaining as i64;
            return reply(2, remaining as i64, &state, &per_limit);
        }
        let mut per_limit = vec![0i64; n];
        let (mut retry, mut worst) = (0i64, 0usize);
        for (i, l) in limits.iter().enumerate() {
            if estimate(&state[i]) + cost <= l.limit as f64 + 1e-9 {
                continue;
            }
            let (w, _, e, c, p) = state[i];
            let (w, e, c, p) = (w as f64, e as f64, c as f64, p as f64);
            let room = l.limit as f64 - cost;
            let wait = if room < 0.0 {
                w
            } else if c <= room {
                let t = w * (1.0 - (room - c) / p);
                (t - e).ceil().max(1.0)
            } else {
                let t = w * (1.0 - room / c);
                ((w - e) + t).ceil().max(1.0)
            } as i64;
            per_limit[i] = wait;
            if wait > retry {
                retry = wait;
                worst = i;
            }
        }
        if retry > 0 {
            if block_ms > 0 && input.cost > 0 {
                self.start_block(&keys[n], worst, block_ms, now);
                retry = retry.max(block_ms as i64 * 1000);
                per_limit[worst] = retry;
            }
            return reply(0, retry, &state, &per_limit);
        }
        if input.cost > 0 {
            for (i, s) in state.iter_mut().enumerate() {
                s.3 += input.cost;
                let (window, index, _, current, previous) = *s;
                self.counters.insert(
                    keys[i].clone(),
                    Counter {
                        index,
                        current,
                        previous,
                        window,
                        expires_at: now + 2 * window,
                    },
                );
            }
        }
        reply(1, 0, &state, &per_limit)
    }
}

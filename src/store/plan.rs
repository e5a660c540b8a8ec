//! What a store is asked to decide with: a [`LimitSet`], the limits of one route with one tier's
//! values, laid out as the script takes them. Each limit counts one key slot (the route's key,
//! or the limit's own) in one state (a Redis key: the log's sorted set, a counter or gcra hash);
//! limits of one slot and algorithm share a state, and the log's share it only when they count
//! the same way. A blocking route keeps a block marker per key slot. The layout of the keys
//! themselves is [`super::layout`].

use std::sync::{Arc, OnceLock};

use crate::algorithm::AlgorithmId;

/// One limit as a store applies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// The limit's name (a hash field, a block marker's text).
    pub name: String,
    /// Units allowed per window for this key (a segment or plan may change it).
    pub limit: u64,
    /// The window in microseconds.
    pub window_us: u64,
    /// `burst` for gcra (0: the limit); 0 for the others.
    pub param: u64,
    /// The index of its state in [`LimitSet::states`].
    pub state: usize,
    /// Charged one unit per attempt whatever the request's cost (a slot in flight; a plain
    /// limit beside limits whose cost the answer states, which are charged the reservation).
    pub per_attempt: bool,
    /// Whether its refusal may start a block (not one that says attempts are in flight).
    pub starts_blocks: bool,
    /// For a limit that counts outcomes, the longest a reservation stays in flight (µs, the
    /// upstream's timeouts): a sliding log writes its reservations that far ahead, so they
    /// count until they are answered, however long that takes, and a refusal that stands on
    /// reservations still in flight starts no block and waits until the soonest is settled.
    /// 0: every charge counts at once.
    pub settle_us: u64,
    /// For a limit with `settle_us`, the longest wait a refusal standing on its reservations in
    /// flight tells (µs, the upstream's `timeout`; 0: `settle_us` alone bounds it): that
    /// refusal's `Retry-After`, and how long the deny cache keeps it. Not sent to the store.
    pub flight_wait_us: u64,
    /// Whether its charge is a reservation the attempt's status settles (`count_status`,
    /// `reset_status`): a charge whose attempt was answered by `on_error` is then released,
    /// since no status will ever settle it. Not sent to the store.
    pub counts_outcomes: bool,
}

impl Limit {
    /// Units a request of `cost` spends of this limit.
    pub fn cost_of(&self, cost: u64) -> u64 {
        match self.per_attempt {
            true => cost.min(1),
            false => cost,
        }
    }
}

/// One Redis key of a decision's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateSpec {
    /// The algorithm keeping it.
    pub algorithm: AlgorithmId,
    /// The key slot it counts (an index into the request's bases).
    pub slot: usize,
    /// What follows the slot's base in its key (`#log`, `#log.<class>`, `#swc`, `#gcra`).
    pub suffix: String,
}

/// How a blocking route blocks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockSpec {
    /// The first block, in milliseconds.
    pub block_ms: u64,
    /// Each next block is this many times longer.
    pub growth: f64,
    /// The longest block, in milliseconds.
    pub max_ms: u64,
    /// Quiet time after a block's end after which the next block is the first again, in ms.
    pub forget_ms: u64,
}

impl BlockSpec {
    /// How long the block of `level` (the n-th within `block_forget` of the last) lasts (ms):
    /// `min(block_for * growth^(n-1), block_max)`, as `lua/decide.lua`'s `start_block` has it.
    pub fn length_ms(&self, level: u64) -> u64 {
        let exponent = i32::try_from(level.max(1) - 1).unwrap_or(i32::MAX);
        let grown = (self.block_ms as f64 * self.growth.powi(exponent)).floor();
        match grown.is_nan() || grown > self.max_ms as f64 {
            true => self.max_ms,
            false => grown as u64,
        }
    }
}

/// Where a limit set's refusals are recorded, and which of its limits record theirs (a shadow
/// or delay route's limits, a shadow-mode rate limit, refuse no one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusals {
    /// The route's index (`super::layout::blocked_index`; what a refusal records there is
    /// `super::refused`).
    pub index: String,
    /// Per limit of the set, in its order: whether its refusals are recorded.
    pub recorded: Vec<bool>,
}

/// Every limit of a key, decided together: all charged or none.
#[derive(Debug)]
pub struct LimitSet {
    /// Whether and how the route blocks.
    pub block: Option<BlockSpec>,
    /// The limits in the route's order.
    pub limits: Vec<Limit>,
    /// The states the limits count in.
    pub states: Vec<StateSpec>,
    /// How many key slots a request brings (bases, in slot order).
    pub slots: usize,
    /// Where its refusals are recorded (`/admin/blocked`); `None`: nowhere.
    pub refusals: Option<Refusals>,
    /// The set cut to one slot each, made on first use (cluster decisions whose keys live in
    /// several slots are decided one part per slot).
    parts: OnceLock<Vec<Arc<LimitSet>>>,
    /// The set as the decision code reads it (`lua/decide.lua`: one argument per plan), made
    /// on first use: every call that carries the set sends the same bytes.
    text: OnceLock<bytes::Bytes>,
    /// The same without its refusal index (a cluster call cannot reach the index's node).
    text_unindexed: OnceLock<bytes::Bytes>,
}

impl PartialEq for LimitSet {
    fn eq(&self, other: &LimitSet) -> bool {
        self.block == other.block
            && self.limits == other.limits
            && self.states == other.states
            && self.slots == other.slots
            && self.refusals == other.refusals
    }
}

impl LimitSet {
    /// A set of `limits` counting in `states` over `slots` key slots.
    pub fn new(
        block: Option<BlockSpec>,
        limits: Vec<Limit>,
        states: Vec<StateSpec>,
        slots: usize,
    ) -> LimitSet {
        LimitSet {
            block,
            limits,
            states,
            slots,
            refusals: None,
            parts: OnceLock::new(),
            text: OnceLock::new(),
            text_unindexed: OnceLock::new(),
        }
    }

    /// The same set, its refusals recorded as `refusals` says.
    pub fn recording(mut self, refusals: Option<Refusals>) -> LimitSet {
        self.refusals = refusals;
        self
    }

    /// The set as the decision code reads it: block settings, key slots, states, limits, and
    /// where refusals are recorded (`indexed`; else nowhere), each field followed by a tab (no
    /// name holds one: names are printable). Made once per set and form.
    pub fn text(&self, indexed: bool) -> bytes::Bytes {
        let (cell, with) = match indexed {
            true => (&self.text, self.refusals.as_ref()),
            false => (&self.text_unindexed, None),
        };
        cell.get_or_init(|| bytes::Bytes::from(plan_text(self, with)))
            .clone()
    }

    /// One `sliding_log`-style set for tests and tools: every limit in its own state of
    /// `algorithm`s, one key slot, no block.
    pub fn simple(limits: &[(&str, u64, u64, AlgorithmId)]) -> LimitSet {
        let mut states: Vec<StateSpec> = Vec::new();
        let limits = limits
            .iter()
            .map(|&(name, limit, window_us, algorithm)| {
                let state = match states.iter().position(|s| s.algorithm == algorithm) {
                    Some(i) => i,
                    None => {
                        states.push(StateSpec {
                            algorithm,
                            slot: 0,
                            suffix: algorithm.get().key_suffix().to_string(),
                        });
                        states.len() - 1
                    }
                };
                Limit {
                    name: name.to_string(),
                    limit,
                    window_us,
                    param: 0,
                    state,
                    per_attempt: algorithm.get().per_attempt(),
                    starts_blocks: algorithm.get().starts_blocks(),
                    settle_us: 0,
                    flight_wait_us: 0,
                    counts_outcomes: false,
                }
            })
            .collect();
        LimitSet::new(None, limits, states, 1)
    }

    /// The same limits without blocks: what the windows alone decide (whether a key whose
    /// block ended is still refused).
    pub fn without_block(&self) -> LimitSet {
        LimitSet::new(None, self.limits.clone(), self.states.clone(), self.slots)
            .recording(self.refusals.clone())
    }

    /// The index of the limit called `name` that counts key slot `slot`, if the set has one (a
    /// block marker's limit may have been removed, renamed or given another key by a reload
    /// since: such a block refuses nothing).
    pub fn named(&self, slot: usize, name: &str) -> Option<usize> {
        (0..self.limits.len()).find(|&i| self.limits[i].name == name && self.slot_of(i) == slot)
    }

    /// The key slot limit `i` counts.
    pub fn slot_of(&self, i: usize) -> usize {
        self.states[self.limits[i].state].slot
    }

    /// The algorithm of limit `i`.
    pub fn algorithm_of(&self, i: usize) -> AlgorithmId {
        self.states[self.limits[i].state].algorithm
    }

    /// Every key one decision touches, from the bases of its slots (layout in
    /// `lua/README.md`): one per state, then a block marker per slot when the route blocks.
    pub fn keys(&self, bases: &[String]) -> Vec<String> {
        let mut keys: Vec<String> = self
            .states
            .iter()
            .map(|s| super::layout::state_key(&bases[s.slot], &s.suffix))
            .collect();
        if self.block.is_some() {
            keys.extend(bases.iter().map(|b| super::layout::block_key(b)));
        }
        keys
    }

    /// The slots any limit counts (a set whose limits share one key has one).
    pub fn used_slots(&self) -> Vec<usize> {
        let mut slots: Vec<usize> = self.states.iter().map(|s| s.slot).collect();
        slots.sort_unstable();
        slots.dedup();
        slots
    }

    /// The part of this set counting slot `slot` alone (its limits keep their order), and the
    /// index in this set of each of its limits.
    pub fn part(&self, slot: usize) -> (Arc<LimitSet>, Vec<usize>) {
        let parts = self
            .parts
            .get_or_init(|| (0..self.slots).map(|s| Arc::new(self.cut_to(s))).collect());
        let indexes = (0..self.limits.len())
            .filter(|&i| self.slot_of(i) == slot)
            .collect();
        (parts[slot].clone(), indexes)
    }

    fn cut_to(&self, slot: usize) -> LimitSet {
        let kept: Vec<usize> = (0..self.states.len())
            .filter(|&q| self.states[q].slot == slot)
            .collect();
        let states = kept
            .iter()
            .map(|&q| StateSpec {
                slot: 0,
                ..self.states[q].clone()
            })
            .collect();
        let limits = self
            .limits
            .iter()
            .filter(|l| self.states[l.state].slot == slot)
            .map(|l| Limit {
                state: kept.iter().position(|&q| q == l.state).expect("kept"),
                ..l.clone()
            })
            .collect();
        let refusals = self.refusals.as_ref().map(|r| Refusals {
            index: r.index.clone(),
            recorded: (0..self.limits.len())
                .filter(|&i| self.slot_of(i) == slot)
                .map(|i| r.recorded[i])
                .collect(),
        });
        LimitSet::new(self.block, limits, states, 1).recording(refusals)
    }
}

/// `block_ms growth max_ms forget_ms S Q (code slot)*Q N (state name limit window param
/// settle flags)*N index recorded`, each field followed by a tab; a set that does not block
/// sends zeros and growth 1; `flags` is 1 when the limit is charged per attempt, 2 when its
/// refusal starts no block; `index` is the refusal index's key (`-`: none) and `recorded` a
/// `0`/`1` per limit (`-` without an index).
fn plan_text(set: &LimitSet, refusals: Option<&Refusals>) -> String {
    let block = set.block.unwrap_or(BlockSpec {
        block_ms: 0,
        growth: 1.0,
        max_ms: 0,
        forget_ms: 0,
    });
    let mut fields = vec![
        block.block_ms.to_string(),
        block.growth.to_string(),
        block.max_ms.to_string(),
        block.forget_ms.to_string(),
        set.slots.to_string(),
        set.states.len().to_string(),
    ];
    for s in &set.states {
        fields.push(s.algorithm.code().to_string());
        fields.push((s.slot + 1).to_string());
    }
    fields.push(set.limits.len().to_string());
    for l in &set.limits {
        fields.extend([
            (l.state + 1).to_string(),
            l.name.clone(),
            l.limit.to_string(),
            l.window_us.to_string(),
            l.param.to_string(),
            l.settle_us.to_string(),
            (u8::from(l.per_attempt) + 2 * u8::from(!l.starts_blocks)).to_string(),
        ]);
    }
    match refusals {
        Some(r) => {
            fields.push(r.index.clone());
            fields.push(
                r.recorded
                    .iter()
                    .map(|&on| if on { '1' } else { '0' })
                    .collect(),
            );
        }
        None => fields.extend(["-".to_string(), "-".to_string()]),
    }
    fields.iter().map(|f| format!("{f}\t")).collect()
}

//! The twin of `lua/decide.lua`: one decision (or settlement) on keys taken out of the memory
//! store's keyspace, step for step as the script takes them, answering in the script's reply
//! layout. Each algorithm's own steps are its [`KeyState`]; what is here is the shared part:
//! the block check and start, all-or-nothing charging, the reply, refunds and resets.

use std::collections::HashMap;

use smallvec::{smallvec, SmallVec};

use crate::algorithm::{KeyState, LimitParams};
use crate::store::{BlockSpec, Decision, LimitSet};

/// A block marker: the limit that started it, its end (µs) and its level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// The limit named in the 429s of the block.
    pub name: String,
    /// When the block ends.
    pub until: u64,
    /// The how-many-th block within `block_forget` of the last.
    pub level: u64,
}

/// What a key holds.
pub enum Value {
    /// An algorithm's state.
    State(Box<dyn KeyState>),
    /// A block marker.
    Marker(Marker),
}

/// A key's value and when it expires (µs; `u64::MAX`: never).
pub struct Slot {
    /// What it holds.
    pub value: Value,
    /// When Redis would drop it.
    pub expires_at: u64,
}

impl Slot {
    /// A copy of the key (a dry run decides on copies).
    pub fn duplicate(&self) -> Slot {
        let value = match &self.value {
            Value::State(state) => Value::State(state.duplicate()),
            Value::Marker(marker) => Value::Marker(marker.clone()),
        };
        Slot {
            value,
            expires_at: self.expires_at,
        }
    }
}

/// The keys one call works on, taken out of the keyspace (`None`: absent or expired).
pub type Keys = HashMap<String, Option<Slot>, foldhash::fast::RandomState>;

/// The state of `key`, made with `make` when the key holds none.
pub(super) fn state_mut<'k>(
    keys: &'k mut Keys,
    key: &str,
    make: impl FnOnce() -> Box<dyn KeyState>,
) -> &'k mut Box<dyn KeyState> {
    let slot = keys.get_mut(key).expect("the call took every key it uses");
    if !matches!(
        slot,
        Some(Slot {
            value: Value::State(_),
            ..
        })
    ) {
        *slot = Some(Slot {
            value: Value::State(make()),
            expires_at: u64::MAX,
        });
    }
    match slot {
        Some(Slot {
            value: Value::State(state),
            ..
        }) => state,
        _ => unreachable!("just made"),
    }
}

pub(super) fn marker(keys: &Keys, key: &str) -> Option<Marker> {
    match keys.get(key)? {
        Some(Slot {
            value: Value::Marker(m),
            ..
        }) => Some(m.clone()),
        _ => None,
    }
}

/// Limit `i` of `set` as its algorithm takes it.
pub(super) fn params(set: &LimitSet, i: usize) -> LimitParams<'_> {
    let l = &set.limits[i];
    LimitParams {
        name: &l.name,
        limit: l.limit,
        window: l.window_us,
        param: l.param,
    }
}

/// Per limit or per state of a decision: a route has few, kept on the stack.
pub(super) type Few<T> = SmallVec<[T; 4]>;

/// Each state's longest window and the limit of that window (`swin`, `sbound` in Lua).
pub(super) fn state_windows(set: &LimitSet) -> Few<(u64, u64)> {
    let mut out: Few<(u64, u64)> = smallvec![(0, 0); set.states.len()];
    for l in &set.limits {
        let (w, b) = &mut out[l.state];
        if l.window_us > *w || (l.window_us == *w && l.limit < *b) {
            (*w, *b) = (l.window_us, l.limit);
        }
    }
    out
}

/// One decision, as the loop body of `decide.lua`: `cost` 0 reads. `keys_of` are the
/// decision's keys in script order; `member` its first unit's member.
pub fn decide(
    keys: &mut Keys,
    set: &LimitSet,
    keys_of: &[String],
    cost: u64,
    member: &str,
    d: u64,
    now: u64,
) -> Vec<i64> {
    let commit = cost > 0;
    let windows = state_windows(set);
    for (q, spec) in set.states.iter().enumerate() {
        let state = state_mut(keys, &keys_of[q], || spec.algorithm.get().new_state());
        state.open(now, windows[q].0, windows[q].1);
    }
    let views: Few<usize> = (0..set.limits.len())
        .map(|i| {
            let state = state_mut(keys, &keys_of[set.limits[i].state], || unreachable!());
            state.view(&params(set, i), now)
        })
        .collect();
    let n = set.limits.len();
    let q = set.states.len();
    let mut per_limit: Few<i64> = smallvec![0; n];
    let mut flight: Few<bool> = smallvec![false; n];
    // the key slot blocked longest, by a limit of the set that still counts that slot (a block
    // whose limit a reload removed, renamed or gave another key refuses nothing; its level
    // still counts for the next block)
    let (mut blocked, mut level): (Option<(Marker, usize)>, u64) = (None, 0);
    if set.block.is_some() {
        for s in 0..set.slots {
            if let Some(m) = marker(keys, &keys_of[q + s]) {
                let longer = blocked.as_ref().is_none_or(|(b, _)| m.until > b.until);
                if let (true, true, Some(named)) = (m.until > now, longer, set.named(s, &m.name)) {
                    blocked = Some((m.clone(), named));
                }
                level = level.max(m.level);
            }
        }
    }
    let reply = if let Some((b, named)) = blocked {
        // Retry-After is the remaining block time, or a limit's own wait if later.
        let remaining = (b.until - now) as i64;
        let mut retry = remaining;
        for i in 0..n {
            let l = &set.limits[i];
            let state = state_mut(keys, &keys_of[l.state], || unreachable!());
            if !state.fits(views[i], l.limit, l.cost_of(cost)) {
                per_limit[i] = state.wait(views[i], l.limit, l.cost_of(cost), now);
                retry = retry.max(per_limit[i]);
            }
        }
        per_limit[named] = per_limit[named].max(remaining);
        let answer = Answer {
            code: 2,
            retry,
            level: b.level,
            block_left: remaining,
            per_limit: &per_limit,
            flight: &flight,
        };
        reply(keys, set, keys_of, &views, &answer, now)
    } else {
        let mut retry = 0i64;
        for i in 0..n {
            let l = &set.limits[i];
            let state = state_mut(keys, &keys_of[l.state], || unreachable!());
            if !state.fits(views[i], l.limit, l.cost_of(cost)) {
                let w = state.wait(views[i], l.limit, l.cost_of(cost), now);
                per_limit[i] = w;
                retry = retry.max(w);
            }
        }
        if retry > 0 {
            if commit {
                // A block starts only from answered attempts: a limit refusing only for
                // reservations still in flight waits until the soonest is settled instead
                // (read also where no block follows: the refusal list's dry run).
                for (i, l) in set.limits.iter().enumerate() {
                    if per_limit[i] > 0 && l.settle_us > 0 {
                        let state = state_mut(keys, &keys_of[l.state], || unreachable!());
                        let f = state.in_flight(
                            views[i],
                            &l.name,
                            l.limit,
                            l.cost_of(cost),
                            l.settle_us,
                            now,
                        );
                        if f > 0 {
                            flight[i] = true;
                            per_limit[i] = per_limit[i].min(f);
                        } else if f < 0 {
                            // on attempts kept without an answer: the window's wait, told
                            // past `settle`
                            flight[i] = true;
                            per_limit[i] += l.settle_us as i64;
                        }
                    }
                }
            }
            if let (Some(block), true) = (set.block, commit) {
                let mut levels: Few<Option<u64>> = smallvec![None; set.slots];
                for (s, level_of) in levels.iter_mut().enumerate() {
                    // a limit whose refusal starts no block (attempts in flight), or stands on
                    // reservations still in flight, names none
                    let refusing = (0..n).filter(|&i| {
                        per_limit[i] > 0
                            && !flight[i]
                            && set.slot_of(i) == s
                            && set.limits[i].starts_blocks
                    });
                    let named = refusing.fold(None, |best: Option<usize>, i| match best {
                        Some(b) if per_limit[b] >= per_limit[i] => Some(b),
                        _ => Some(i),
                    });
                    if let Some(i) = named {
                        let name = &set.limits[i].name;
                        let (length, lvl) = start_block(keys, &keys_of[q + s], &block, name, now);
                        per_limit[i] = per_limit[i].max(length);
                        *level_of = Some(lvl);
                    }
                }
                let mut worst = 0;
                retry = 0;
                for (i, &w) in per_limit.iter().enumerate() {
                    if w > retry {
                        (retry, worst) = (w, i);
                    }
                }
                level = levels[set.slot_of(worst)].unwrap_or(level);
            }
            let answer = Answer {
                code: 0,
                retry,
                level,
                block_left: 0,
                per_limit: &per_limit,
                flight: &flight,
            };
            reply(keys, set, keys_of, &views, &answer, now)
        } else {
            if commit {
                for (i, l) in set.limits.iter().enumerate() {
                    let state = state_mut(keys, &keys_of[l.state], || unreachable!());
                    state.charge(views[i], l.cost_of(cost), member, d, l.settle_us);
                }
            }
            let answer = Answer {
                code: 1,
                retry: 0,
                level,
                block_left: 0,
                per_limit: &per_limit,
                flight: &flight,
            };
            reply(keys, set, keys_of, &views, &answer, now)
        }
    };
    for key in &keys_of[..q] {
        finish(keys, key, now);
    }
    reply
}

/// Lua's `start_block`: the n-th block within `block_forget` of the last lasts
/// `min(block_for * growth^(n-1), block_max)`.
pub(super) fn start_block(
    keys: &mut Keys,
    key: &str,
    block: &BlockSpec,
    name: &str,
    now: u64,
) -> (i64, u64) {
    let level = marker(keys, key).map_or(1, |m| m.level + 1);
    let length = block.length_ms(level) as i64 * 1000;
    let until = now + length as u64;
    let ttl_ms = (length as u64).div_ceil(1000) + block.forget_ms;
    keys.insert(
        key.to_string(),
        Some(Slot {
            value: Value::Marker(Marker {
                name: name.to_string(),
                until,
                level,
            }),
            expires_at: now + ttl_ms * 1000,
        }),
    );
    (length, level)
}

/// A decision's answer before its per-limit reports: code, wait, level, and per limit its wait
/// and whether its refusal stands only on reservations in flight.
struct Answer<'a> {
    code: i64,
    retry: i64,
    level: u64,
    /// What is left of the block serving a blocked decision (µs, 0 otherwise).
    block_left: i64,
    per_limit: &'a [i64],
    flight: &'a [bool],
}

/// The reply's values for one decision (a refusal in flight has its wait negated, as in Lua).
fn reply(
    keys: &mut Keys,
    set: &LimitSet,
    keys_of: &[String],
    views: &[usize],
    answer: &Answer<'_>,
    now: u64,
) -> Vec<i64> {
    let mut out = Vec::with_capacity(Decision::reply_len(set));
    out.extend([
        answer.code,
        answer.retry,
        answer.level as i64,
        answer.block_left,
    ]);
    for (i, l) in set.limits.iter().enumerate() {
        let state = state_mut(keys, &keys_of[l.state], || unreachable!());
        let (used, reset) = state.report(views[i], now);
        let wait = match answer.flight[i] {
            true => -answer.per_limit[i],
            false => answer.per_limit[i],
        };
        out.extend([used, reset, wait]);
    }
    out
}

/// Lua's `finish` for one key: writes its charges and sets the new expiry; an empty state
/// leaves the keyspace, as Redis deletes an empty key.
fn finish(keys: &mut Keys, key: &str, now: u64) {
    let Some(slot) = keys.get_mut(key).and_then(Option::as_mut) else {
        return;
    };
    if let Value::State(state) = &mut slot.value {
        if let Some(expires_at) = state.finish(now) {
            slot.expires_at = expires_at;
        }
        if state.is_empty() {
            keys.insert(key.to_string(), None);
        }
    }
}

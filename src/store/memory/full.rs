//! Deciding when the memory store has no room for a decision's keys (or the overflow sketch
//! still counts one of them): limits whose state the table holds keep their exact counts
//! ([`call`]), limits whose state it does not hold are counted in their limit's overflow sketch
//! ([`overflow`]). The request is allowed only when both have room, and then both are charged;
//! keys the table did not hold stay out of it.
//!
//! Blocks: a block marker the table has no room for is kept in the block sketch ([`blocks`])
//! and read back from it, so a key blocked while the table is full stays blocked for its whole
//! block, its level escalating. A limit counted in the sketch starts a block only when it
//! counts every attempt at once: the sketch cannot tell reservations in flight from answered
//! attempts (`count_status`), and a block must never stand on attempts in flight.
//!
//! Differences from `on_error`: a full table is not a failed store, so nothing here fails open.

use super::blocks::{Blocks, SketchedBlock};
use super::call::{self, Keys, Marker, Slot, Value};
use super::overflow::{Cells, Overflow};
use crate::store::{BlockSpec, Limit, LimitSet, Settlement, REPLY_HEAD};

/// Where a full table's keys go: their limits' counts and their blocks.
pub struct Spill {
    /// The limits' overflow sketches.
    pub counts: Overflow,
    /// The blocks of keys the table has no room for.
    pub blocks: Blocks,
}

impl Spill {
    /// Empty, sized for a table of `max_keys`.
    pub fn new(max_keys: usize) -> Spill {
        Spill {
            counts: Overflow::new(max_keys),
            blocks: Blocks::new(max_keys),
        }
    }
}

/// The most a key's sketch window lets through: the limit, or a gcra limit's smaller `burst`
/// (gcra lets no more through at once, and the sketch is never looser than its algorithm).
fn sketch_cap(l: &Limit) -> u64 {
    match l.param {
        0 => l.limit,
        burst => l.limit.min(burst),
    }
}

/// One limit counted in the sketch: its index in the set, its sketch and its key's cells.
struct Counted {
    limit: usize,
    scope: u64,
    cells: Cells,
}

/// The limits of `set` whose state key the table does not hold (`None` in `keys`).
fn counted_in_sketch(
    overflow: &Overflow,
    keys: &Keys,
    set: &LimitSet,
    keys_of: &[String],
) -> Vec<Counted> {
    set.limits
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            let key = &keys_of[l.state];
            matches!(keys.get(key), Some(None)).then(|| Counted {
                limit: i,
                scope: overflow.scope(key, &l.name, l.window_us),
                cells: overflow.cells(key),
            })
        })
        .collect()
}

/// Whether the sketch counts units for a key of this decision that the table does not hold, or
/// holds a block for one: such a key stays in the sketch until they pass (until the block's
/// level is forgotten), even once the table has room, so that it never starts afresh inside a
/// window (units of other keys in all its cells keep it there too: the sketch cannot tell them
/// apart). Reads two flags while no sketch exists.
pub fn counts_any(
    spill: &Spill,
    keys: &Keys,
    set: &LimitSet,
    keys_of: &[String],
    now: u64,
) -> bool {
    let blocks = &spill.blocks;
    if absent_markers(blocks, keys, set, keys_of, now).any(|(_, k)| blocks.block(k, now).is_some())
    {
        return true;
    }
    let overflow = &spill.counts;
    if !overflow.in_use() {
        return false;
    }
    let counted = counted_in_sketch(overflow, keys, set, keys_of);
    let mut sketches = overflow.lock(now);
    counted.iter().any(|c| {
        sketches
            .find(c.scope)
            .is_some_and(|sketch| sketch.count(c.cells, now) > 0)
    })
}

/// What a decision did in the sketch.
#[derive(Debug, Default)]
pub struct InSketch {
    /// Whether some limit was counted there (its answer is approximate).
    pub counted: bool,
    /// The limits charged there, each with the fixed window the charge went to.
    pub charged: Vec<(usize, u64)>,
}

/// How a decision uses the sketch: charging it, as the call whose first unit is `member`, or
/// only reading it (a dry run, on copies of the table's keys).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Sketch<'m> {
    /// A decision that charges what it allows.
    Charged {
        /// The member of its first unit.
        member: &'m str,
    },
    /// A dry run: the same answer, the sketch left as it was.
    Read,
}

impl<'m> Sketch<'m> {
    /// The member of the decision's first unit (a dry run's is `dry`, written nowhere).
    pub fn member(self) -> &'m str {
        match self {
            Sketch::Charged { member } => member,
            Sketch::Read => "dry",
        }
    }
}

/// One decision of `cost` (> 0) at `now` on `keys` as taken from the table, in the script's
/// reply layout, and what it did in the sketch (`sketch_use`: charged, or only read). Keys the
/// table did not hold are `None` in `keys` afterwards, so putting them back adds nothing.
pub fn decide(
    spill: &Spill,
    keys: &mut Keys,
    set: &LimitSet,
    keys_of: &[String],
    cost: u64,
    sketch_use: Sketch<'_>,
    now: u64,
) -> (Vec<i64>, InSketch) {
    let member = sketch_use.member();
    let overflow = &spill.counts;
    let absent: Vec<String> = keys
        .iter()
        .filter(|(_, slot)| slot.is_none())
        .map(|(key, _)| key.clone())
        .collect();
    // blocks the table has no room for, read as the markers it would hold
    for (key, marker) in sketched_blocks(&spill.blocks, keys, set, keys_of, now) {
        keys.insert(key, Some(marker_slot(&marker)));
    }
    let counted = counted_in_sketch(overflow, keys, set, keys_of);
    let mut sketches = overflow.lock(now);
    let waits: Vec<u64> = counted
        .iter()
        .map(|c| {
            let l = &set.limits[c.limit];
            let sketch = sketches.get(c.scope, l.window_us, now);
            let wait = sketch.wait_us(c.cells, l.cost_of(cost), sketch_cap(l), now);
            // a slot in flight may come back any moment: its refusal tells its fixed wait,
            // not the sketch window's end
            let fixed = set.states[l.state].algorithm.get().fixed_wait_us();
            match fixed {
                Some(fixed) if wait > 0 => fixed as u64,
                _ => wait,
            }
        })
        .collect();
    let mut reply = match waits.iter().all(|&w| w == 0) {
        // the sketch has room: the table decides its keys for real
        true => call::decide(keys, set, keys_of, cost, member, 1, now),
        false => refused(keys, set, keys_of, cost, member, &waits, now),
    };
    let started = match &set.block {
        Some(block) if reply[0] == 0 => {
            start_blocks(keys, set, keys_of, &counted, &waits, block, now)
        }
        _ => Vec::new(),
    };
    let allowed = reply[0] == 1;
    let mut charged = Vec::new();
    for (c, &wait) in counted.iter().zip(&waits) {
        let l = &set.limits[c.limit];
        let sketch = sketches.get(c.scope, l.window_us, now);
        let mut used = sketch.count(c.cells, now);
        if allowed && sketch_use != Sketch::Read {
            charged.push((c.limit, sketch.add(c.cells, l.cost_of(cost), now)));
            used = sketch.count(c.cells, now);
        } else if allowed {
            used += l.cost_of(cost);
        }
        let at = REPLY_HEAD + 3 * c.limit;
        reply[at] = i64::try_from(used).unwrap_or(i64::MAX);
        reply[at + 1] = sketch.reset_us(now) as i64;
        reply[at + 2] = wait as i64;
    }
    drop(sketches);
    for &(i, length, level) in &started {
        let at = REPLY_HEAD + 3 * i + 2;
        reply[at] = reply[at].max(length);
        reply[1] = reply[1].max(length);
        reply[2] = reply[2].max(level as i64);
    }
    if sketch_use != Sketch::Read {
        record_blocks(&spill.blocks, keys, &absent, now);
    }
    for key in absent {
        keys.insert(key, None);
    }
    let in_sketch = InSketch {
        counted: !counted.is_empty(),
        charged,
    };
    (reply, in_sketch)
}

/// Applies to the sketch what `settlement` does to a charge it counted there (`sketched`, as
/// [`decide`] noted it): a refund or reset gives the charge back, a cost settled lower gives
/// back the difference and one settled higher charges it. A reset cannot forget the key's
/// other units there (the sketch cannot tell them from other keys'): they pass with their
/// windows.
pub fn settle(
    overflow: &Overflow,
    settlement: &Settlement,
    keys_of: &[String],
    sketched: &[(usize, u64)],
    now: u64,
) {
    if sketched.is_empty() {
        return;
    }
    let set = &settlement.limits;
    let mut sketches = overflow.lock(now);
    for &(i, epoch) in sketched {
        let l = &set.limits[i];
        let charged = l.cost_of(settlement.receipt.cost);
        let given_back = settlement.refund.contains(&i) || settlement.reset.contains(&i);
        let settled_to = (settlement.settle_to.iter()).find_map(|&(s, to)| (s == i).then_some(to));
        let key = &keys_of[l.state];
        let Some(sketch) = sketches.find(overflow.scope(key, &l.name, l.window_us)) else {
            continue;
        };
        let cells = overflow.cells(key);
        match (given_back, settled_to) {
            (true, _) => sketch.take_back(cells, charged, epoch, now),
            (false, Some(to)) if to < charged => sketch.take_back(cells, charged - to, epoch, now),
            (false, Some(to)) if to > charged => {
                sketch.add(cells, to - charged, now);
            }
            _ => {}
        }
    }
}

/// The reply when some sketch has no room, refused with the longest wait: the table's keys
/// decided on copies (so nothing of theirs is charged), which become the keys when the table
/// refuses too (a refusal charges nothing, and starts the blocks the table's limits start); a
/// key serving a block stays blocked.
fn refused(
    keys: &mut Keys,
    set: &LimitSet,
    keys_of: &[String],
    cost: u64,
    member: &str,
    waits: &[u64],
    now: u64,
) -> Vec<i64> {
    let copies = || -> Keys {
        keys.iter()
            .map(|(key, slot)| (key.clone(), slot.as_ref().map(call::Slot::duplicate)))
            .collect()
    };
    let mut attempted = copies();
    let attempt = call::decide(&mut attempted, set, keys_of, cost, member, 1, now);
    let mut reply = match attempt[0] {
        // the table alone has room: its counts as they are, uncharged
        1 => call::decide(&mut copies(), set, keys_of, 0, member, 1, now),
        // refused by the table too: the copies are the keys as that refusal leaves them (it
        // charges nothing, and starts the blocks the table's limits start)
        _ => {
            *keys = attempted;
            attempt
        }
    };
    let longest = waits.iter().copied().max().unwrap_or(0) as i64;
    if reply[0] == 1 {
        (reply[0], reply[1]) = (0, longest);
    } else {
        reply[1] = reply[1].max(longest);
    }
    reply
}

/// The marker keys of `set`'s key slots that the table does not hold, each with its slot, while
/// the block sketch may hold a block (none on a route that does not block).
fn absent_markers<'k>(
    blocks: &Blocks,
    keys: &'k Keys,
    set: &LimitSet,
    keys_of: &'k [String],
    now: u64,
) -> impl Iterator<Item = (usize, &'k String)> + 'k {
    let looked = set.block.is_some() && blocks.in_use(now);
    let markers = keys_of.get(set.states.len()..).unwrap_or_default();
    let absent = move |(_, key): &(usize, &String)| matches!(keys.get(*key), Some(None));
    markers
        .iter()
        .take(set.slots)
        .enumerate()
        .filter(move |m| looked && absent(m))
}

/// The blocks the block sketch holds for marker keys of `set` the table does not hold, as
/// markers named by a limit of their key slot that starts blocks.
fn sketched_blocks(
    blocks: &Blocks,
    keys: &Keys,
    set: &LimitSet,
    keys_of: &[String],
    now: u64,
) -> Vec<(String, (Marker, u64))> {
    let named = |s: usize| {
        (0..set.limits.len()).find(|&i| set.slot_of(i) == s && set.limits[i].starts_blocks)
    };
    absent_markers(blocks, keys, set, keys_of, now)
        .filter_map(|(s, key)| {
            let b = blocks.block(key, now)?;
            let name = set.limits[named(s)?].name.clone();
            let marker = Marker {
                name,
                until: b.until,
                level: b.level,
            };
            Some((key.clone(), (marker, b.forget_at)))
        })
        .collect()
}

/// A marker read from the block sketch as the table would hold it.
fn marker_slot((marker, forget_at): &(Marker, u64)) -> Slot {
    Slot {
        value: Value::Marker(marker.clone()),
        expires_at: *forget_at,
    }
}

/// Starts a block for each key slot a limit counted in the sketch refused, where that limit
/// starts blocks, counts every attempt at once, and no block of the slot started already:
/// each as `(limit, length µs, level)`.
fn start_blocks(
    keys: &mut Keys,
    set: &LimitSet,
    keys_of: &[String],
    counted: &[Counted],
    waits: &[u64],
    block: &BlockSpec,
    now: u64,
) -> Vec<(usize, i64, u64)> {
    let q = set.states.len();
    let mut started: Vec<(usize, i64, u64)> = Vec::new();
    for (c, &wait) in counted.iter().zip(waits) {
        let l = &set.limits[c.limit];
        let slot = set.slot_of(c.limit);
        let key = &keys_of[q + slot];
        let serving = call::marker(keys, key).is_some_and(|m| m.until > now);
        if wait == 0 || !l.starts_blocks || l.settle_us > 0 || serving {
            continue;
        }
        let (length, level) = call::start_block(keys, key, block, &l.name, now);
        started.push((c.limit, length, level));
    }
    started
}

/// Records in the block sketch the markers of `absent` keys (the table has no room for them)
/// that this decision left in `keys`.
fn record_blocks(blocks: &Blocks, keys: &Keys, absent: &[String], now: u64) {
    for key in absent {
        if let Some(Some(Slot {
            value: Value::Marker(m),
            expires_at,
        })) = keys.get(key)
        {
            let block = SketchedBlock {
                until: m.until,
                level: m.level,
                forget_at: *expires_at,
            };
            blocks.record(key, block, now);
        }
    }
}

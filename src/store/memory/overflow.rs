//! The overflow sketch: where the memory store counts the keys it has no room for. Each limit
//! gets a count-min sketch of [`ROWS`] rows of `width` counters; a key adds its units to one
//! cell per row (a seeded hash per row) and its count is the smallest of its cells. Every cell
//! keeps two counters, the current fixed window and the whole previous one, and a key's count is
//! their sum: any sliding window of the limit's length that ends now lies inside those two, and
//! other keys sharing a cell only add, so a count can be too high, never too low.
//!
//! Differences from the exact table: fixed memory whatever the number of keys, and a key's
//! quota can be spent by others sharing its cells (stricter, never looser). With `N` units
//! counted in a sketch over its two windows, a key's count is over-stated by more than
//! `e * N / width` with probability at most `e^-ROWS` (under 2 %).
//!
//! Nothing here is touched while the table has room: a sketch is made the first time a limit
//! overflows, and dropped once two of its windows pass with nothing counted.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use foldhash::quality::RandomState;

/// Rows of every sketch.
pub const ROWS: usize = 4;
/// The narrowest sketch (8 KiB).
const MIN_WIDTH: usize = 256;
/// The widest sketch (4 MiB): a store of a million keys or more.
const MAX_WIDTH: usize = 1 << 17;

/// The width of the sketches of a store holding at most `max_keys` live keys: a counter per
/// eight keys the table holds, a power of two from 256 to 131,072.
pub fn width_for(max_keys: usize) -> usize {
    (max_keys / 8)
        .next_power_of_two()
        .clamp(MIN_WIDTH, MAX_WIDTH)
}

/// The cells of one key, one per row (an index into a row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cells([usize; ROWS]);

/// One limit's sketch.
pub struct Sketch {
    /// The limit's window (µs): the length of each fixed window.
    window_us: u64,
    /// The fixed window `current` counts (instant / window).
    epoch: u64,
    /// The fixed window of the last units added.
    last_added: u64,
    /// Counters per row and column of the current fixed window (`ROWS * width`).
    current: Box<[u32]>,
    /// The same for the fixed window before it.
    previous: Box<[u32]>,
}

impl Sketch {
    fn new(width: usize, window_us: u64, now: u64) -> Sketch {
        let window_us = window_us.max(1);
        Sketch {
            window_us,
            epoch: now / window_us,
            last_added: now / window_us,
            current: vec![0; ROWS * width].into_boxed_slice(),
            previous: vec![0; ROWS * width].into_boxed_slice(),
        }
    }

    fn width(&self) -> usize {
        self.current.len() / ROWS
    }

    /// Moves the windows up to `now` (an earlier instant moves nothing: it is counted in the
    /// later window, which keeps it longer).
    fn roll(&mut self, now: u64) {
        let epoch = now / self.window_us;
        if epoch <= self.epoch {
            return;
        }
        if epoch == self.epoch + 1 {
            std::mem::swap(&mut self.current, &mut self.previous);
        } else {
            self.previous.fill(0);
        }
        self.current.fill(0);
        self.epoch = epoch;
    }

    /// Whether nothing it counted is within two windows of `now`.
    fn stale(&self, now: u64) -> bool {
        now / self.window_us >= self.last_added + 2
    }

    fn index(&self, row: usize, cells: Cells) -> usize {
        row * self.width() + cells.0[row]
    }

    /// The smallest over the rows of what `pick` reads from a key's cell; a saturated counter
    /// reads as unbounded.
    fn smallest(&self, cells: Cells, pick: impl Fn(usize) -> u64) -> u64 {
        (0..ROWS)
            .map(|row| pick(self.index(row, cells)))
            .min()
            .unwrap_or(0)
    }

    /// The units counted for a key in the current and previous windows at `now`.
    pub fn count(&mut self, cells: Cells, now: u64) -> u64 {
        self.roll(now);
        self.smallest(cells, |i| {
            widen(self.current[i]).saturating_add(widen(self.previous[i]))
        })
    }

    /// Adds `units` to a key's cells at `now`; answers the fixed window they were added to.
    pub fn add(&mut self, cells: Cells, units: u64, now: u64) -> u64 {
        self.roll(now);
        self.last_added = self.epoch;
        let units = u32::try_from(units).unwrap_or(u32::MAX);
        for row in 0..ROWS {
            let i = self.index(row, cells);
            self.current[i] = self.current[i].saturating_add(units);
        }
        self.epoch
    }

    /// Takes back `units` a key added to fixed window `epoch` (what [`Sketch::add`] answered),
    /// at `now`: from that window while it is still counted, never below zero; a saturated
    /// counter stays saturated (it may hold any number). Only units the key added are taken
    /// back, so every other key's count stays at or above its own units.
    pub fn take_back(&mut self, cells: Cells, units: u64, epoch: u64, now: u64) {
        self.roll(now);
        let counters = match self.epoch.checked_sub(epoch) {
            Some(0) => &mut self.current,
            Some(1) => &mut self.previous,
            _ => return,
        };
        let units = u32::try_from(units).unwrap_or(u32::MAX);
        let width = counters.len() / ROWS;
        for row in 0..ROWS {
            let i = row * width + cells.0[row];
            if counters[i] != u32::MAX {
                counters[i] = counters[i].saturating_sub(units);
            }
        }
    }

    /// Until the next fixed window starts (µs): when the previous window's units drop out.
    pub fn reset_us(&self, now: u64) -> u64 {
        ((self.epoch + 1) * self.window_us)
            .saturating_sub(now)
            .max(1)
    }

    /// Until `units` more fit a key's `limit`, nothing else being counted meanwhile (µs): at the
    /// next fixed window when the current window's count alone leaves room, else once both
    /// windows have passed. Zero when they fit now.
    pub fn wait_us(&mut self, cells: Cells, units: u64, limit: u64, now: u64) -> u64 {
        if self.count(cells, now).saturating_add(units) <= limit {
            return 0;
        }
        let current = self.smallest(cells, |i| widen(self.current[i]));
        let next = self.reset_us(now);
        match current.saturating_add(units) <= limit {
            true => next,
            false => next + self.window_us,
        }
    }
}

/// A counter as a count: a saturated one may hold any number.
fn widen(counter: u32) -> u64 {
    match counter {
        u32::MAX => u64::MAX,
        n => n as u64,
    }
}

/// The sketches of one store, one per limit (its scope: the key layout around the client's
/// part, and the limit's name and window).
pub struct Overflow {
    hasher: RandomState,
    width: usize,
    sketches: Mutex<Vec<(u64, Sketch)>>,
    /// Whether any sketch exists: the one thing a store with room reads.
    in_use: AtomicBool,
}

impl Overflow {
    /// No sketch yet; the ones made will be [`width_for`] `max_keys` wide.
    pub fn new(max_keys: usize) -> Overflow {
        Overflow {
            hasher: RandomState::default(),
            width: width_for(max_keys),
            sketches: Mutex::new(Vec::new()),
            in_use: AtomicBool::new(false),
        }
    }

    /// Whether some limit may have keys counted in a sketch.
    pub fn in_use(&self) -> bool {
        self.in_use.load(Ordering::Relaxed)
    }

    /// The scope of a limit counting `key`: the key with its client part (between the hash
    /// tag's first `|` and its `}`) left out, and the limit's name and window.
    pub fn scope(&self, key: &str, limit: &str, window_us: u64) -> u64 {
        let (before, after) = around_client(key);
        self.hasher.hash_one((before, after, limit, window_us))
    }

    /// The cells of `key` in every sketch.
    pub fn cells(&self, key: &str) -> Cells {
        let mut cells = [0; ROWS];
        for (row, cell) in cells.iter_mut().enumerate() {
            *cell = self.hasher.hash_one((row as u8, key)) as usize & (self.width - 1);
        }
        Cells(cells)
    }

    /// The sketches, locked, with the ones that counted nothing in two windows dropped.
    pub fn lock(&self, now: u64) -> Sketches<'_> {
        let mut sketches = self.sketches.lock().unwrap_or_else(|e| e.into_inner());
        sketches.retain(|(_, s)| !s.stale(now));
        Sketches {
            overflow: self,
            sketches,
        }
    }
}

/// `key` without its client part: what precedes it (up to the hash tag's first `|`) and what
/// follows it (from the tag's `}`). Route and limit names hold no `|`; a key of another shape
/// is its own scope.
fn around_client(key: &str) -> (&str, &str) {
    let Some(open) = key.find('{') else {
        return (key, "");
    };
    match (key[open..].find('|'), key.rfind('}')) {
        (Some(bar), Some(close)) if open + bar < close => (&key[..=open + bar], &key[close..]),
        _ => (key, ""),
    }
}

/// The sketches of a store while one decision reads and charges them (held across both, so
/// two decisions cannot both take a key's last unit).
pub struct Sketches<'a> {
    overflow: &'a Overflow,
    sketches: MutexGuard<'a, Vec<(u64, Sketch)>>,
}

impl Sketches<'_> {
    /// The sketch of `scope`, if one was made.
    pub fn find(&mut self, scope: u64) -> Option<&mut Sketch> {
        self.sketches
            .iter_mut()
            .find(|(s, _)| *s == scope)
            .map(|(_, sketch)| sketch)
    }

    /// The sketch of `scope`, made empty when there is none.
    pub fn get(&mut self, scope: u64, window_us: u64, now: u64) -> &mut Sketch {
        let at = match self.sketches.iter().position(|(s, _)| *s == scope) {
            Some(at) => at,
            None => {
                let sketch = Sketch::new(self.overflow.width, window_us, now);
                self.sketches.push((scope, sketch));
                self.sketches.len() - 1
            }
        };
        &mut self.sketches[at].1
    }
}

impl Drop for Sketches<'_> {
    fn drop(&mut self) {
        let in_use = !self.sketches.is_empty();
        self.overflow.in_use.store(in_use, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000;

    #[test]
    fn widths_follow_the_table() {
        assert_eq!(width_for(0), MIN_WIDTH);
        assert_eq!(width_for(100), MIN_WIDTH);
        assert_eq!(width_for(100_000), 16_384);
        assert_eq!(width_for(1_000_000), MAX_WIDTH);
        assert_eq!(width_for(usize::MAX / 2), MAX_WIDTH);
    }

    #[test]
    fn a_count_covers_the_current_and_the_whole_previous_window() {
        let overflow = Overflow::new(1000);
        let cells = overflow.cells("k");
        let mut sketch = Sketch::new(overflow.width, 10 * SEC, 0);
        sketch.add(cells, 3, 9 * SEC);
        assert_eq!(sketch.count(cells, 9 * SEC), 3);
        // next window: the 3 still count, the whole window long
        assert_eq!(sketch.count(cells, 19 * SEC), 3);
        assert_eq!(sketch.wait_us(cells, 8, 10, 19 * SEC), SEC);
        assert_eq!(sketch.wait_us(cells, 7, 10, 19 * SEC), 0);
        // two windows on: gone
        assert!(!sketch.stale(19 * SEC));
        assert_eq!(sketch.count(cells, 20 * SEC), 0);
        assert!(sketch.stale(20 * SEC));
    }

    #[test]
    fn a_key_whose_current_window_is_full_waits_both_windows() {
        let overflow = Overflow::new(1000);
        let cells = overflow.cells("k");
        let mut sketch = Sketch::new(overflow.width, 10 * SEC, 0);
        sketch.add(cells, 5, 12 * SEC);
        assert_eq!(sketch.wait_us(cells, 1, 5, 15 * SEC), 15 * SEC);
        assert_eq!(sketch.reset_us(15 * SEC), 5 * SEC);
    }

    #[test]
    fn a_charge_is_taken_back_from_the_window_it_went_to() {
        let overflow = Overflow::new(1000);
        let cells = overflow.cells("k");
        let mut sketch = Sketch::new(overflow.width, 10 * SEC, 0);
        let first = sketch.add(cells, 2, SEC);
        let second = sketch.add(cells, 3, 12 * SEC);
        assert_eq!(sketch.count(cells, 12 * SEC), 5);
        // the first charge now sits in the previous window, and comes back from there
        sketch.take_back(cells, 2, first, 13 * SEC);
        assert_eq!(sketch.count(cells, 13 * SEC), 3);
        // never below zero, whatever is given back
        sketch.take_back(cells, 9, second, 13 * SEC);
        assert_eq!(sketch.count(cells, 13 * SEC), 0);
        // taking back more than a window holds leaves the next window alone
        let third = sketch.add(cells, 4, 21 * SEC);
        sketch.take_back(cells, 3, second, 25 * SEC);
        assert_eq!(sketch.count(cells, 25 * SEC), 4);
        sketch.take_back(cells, 4, third, 25 * SEC);
        assert_eq!(sketch.count(cells, 25 * SEC), 0);
    }

    #[test]
    fn saturated_cells_never_read_low() {
        let overflow = Overflow::new(1000);
        let cells = overflow.cells("k");
        let mut sketch = Sketch::new(overflow.width, SEC, 0);
        sketch.add(cells, u64::MAX, 0);
        sketch.add(cells, 1, 0);
        assert_eq!(sketch.count(cells, 0), u64::MAX);
    }

    #[test]
    fn scopes_leave_the_client_out() {
        let o = Overflow::new(1000);
        let a = o.scope("sg:{login|alice}#log", "per-minute", 60 * SEC);
        let b = o.scope("sg:{login|bob|x}#log", "per-minute", 60 * SEC);
        assert_eq!(a, b);
        assert_ne!(a, o.scope("sg:{login|alice}#log", "per-hour", 60 * SEC));
        assert_ne!(a, o.scope("sg:{otp|alice}#log", "per-minute", 60 * SEC));
        assert_ne!(a, o.scope("sg:{login|alice}#swc", "per-minute", 60 * SEC));
        assert_eq!(around_client("plain"), ("plain", ""));
    }

    #[test]
    fn other_keys_only_ever_add() {
        let overflow = Overflow::new(0);
        let mut sketch = Sketch::new(overflow.width, SEC, 0);
        let victim = overflow.cells("victim");
        for i in 0..10_000 {
            sketch.add(overflow.cells(&format!("flood{i}")), 1, 0);
        }
        let before = sketch.count(victim, 0);
        sketch.add(victim, 2, 0);
        assert!(sketch.count(victim, 0) >= before + 2);
    }
}

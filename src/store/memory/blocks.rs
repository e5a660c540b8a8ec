//! The block sketch: where the memory store keeps the blocks of keys it has no room for. When
//! the table is full, a block marker that would be a new key is recorded here instead: one cell
//! per row (a seeded hash per row) keeps the latest end, the highest level and the latest time
//! that level is forgotten of the blocks recorded there. A key's block is read as the smallest
//! of its cells on each, so other keys sharing a cell can only lengthen what a key reads, never
//! shorten it: a key blocked here stays blocked for its whole block, and its level escalates as
//! the table's would (stricter, never looser).
//!
//! Nothing is allocated until the first block is recorded, and a store reads nothing here once
//! the last level recorded is forgotten. The flip side, as for the counts: right after a flood
//! of blocked keys, a newcomer all of whose cells they share reads as blocked too.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use foldhash::quality::RandomState;

use super::overflow::{width_for, ROWS};

/// One cell: the blocks recorded there, merged.
#[derive(Debug, Clone, Copy, Default)]
struct Cell {
    /// The latest end of a block (µs).
    until: u64,
    /// The highest level of a block not yet forgotten.
    level: u64,
    /// When that level is forgotten (µs): the block's end plus `block_forget`.
    forget_at: u64,
}

/// A key's block as the sketch reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SketchedBlock {
    /// When it ends (µs; in the past once only its level is remembered).
    pub until: u64,
    /// Its level.
    pub level: u64,
    /// When its level is forgotten (µs).
    pub forget_at: u64,
}

/// The block sketch of one store.
pub struct Blocks {
    hasher: RandomState,
    width: usize,
    cells: RwLock<Option<Box<[Cell]>>>,
    /// When the level of the last block recorded is forgotten (µs; 0: none recorded): the one
    /// thing a store with room reads, until then.
    in_use_until: AtomicU64,
}

impl Blocks {
    /// No block yet; the sketch made will be [`width_for`] `max_keys` wide.
    pub fn new(max_keys: usize) -> Blocks {
        Blocks {
            hasher: RandomState::default(),
            width: width_for(max_keys),
            cells: RwLock::new(None),
            in_use_until: AtomicU64::new(0),
        }
    }

    /// Whether some block may be remembered at `now`.
    pub fn in_use(&self, now: u64) -> bool {
        self.in_use_until.load(Ordering::Relaxed) > now
    }

    /// The index of `key`'s cell in each row.
    fn indexes(&self, key: &str) -> [usize; ROWS] {
        let mut at = [0; ROWS];
        for (row, i) in at.iter_mut().enumerate() {
            let column = self.hasher.hash_one((row as u8, key)) as usize & (self.width - 1);
            *i = row * self.width + column;
        }
        at
    }

    /// The block of `key` at `now`, while its level is remembered.
    pub fn block(&self, key: &str, now: u64) -> Option<SketchedBlock> {
        if !self.in_use(now) {
            return None;
        }
        let cells = self.cells.read().unwrap_or_else(|e| e.into_inner());
        let cells = cells.as_ref()?;
        let mut read = SketchedBlock {
            until: u64::MAX,
            level: u64::MAX,
            forget_at: u64::MAX,
        };
        for i in self.indexes(key) {
            let cell = cells[i];
            if cell.forget_at <= now {
                return None;
            }
            read.until = read.until.min(cell.until);
            read.level = read.level.min(cell.level);
            read.forget_at = read.forget_at.min(cell.forget_at);
        }
        Some(read)
    }

    /// Records `block` for `key` at `now`.
    pub fn record(&self, key: &str, block: SketchedBlock, now: u64) {
        let mut cells = self.cells.write().unwrap_or_else(|e| e.into_inner());
        let cells = cells.get_or_insert_with(|| vec![Cell::default(); ROWS * self.width].into());
        for i in self.indexes(key) {
            let cell = &mut cells[i];
            if cell.forget_at <= now {
                *cell = Cell::default();
            }
            cell.until = cell.until.max(block.until);
            cell.level = cell.level.max(block.level);
            cell.forget_at = cell.forget_at.max(block.forget_at);
        }
        (self.in_use_until).fetch_max(block.forget_at, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000;

    fn block(until: u64, level: u64, forget_at: u64) -> SketchedBlock {
        SketchedBlock {
            until,
            level,
            forget_at,
        }
    }

    #[test]
    fn a_recorded_block_reads_back_until_its_level_is_forgotten() {
        let blocks = Blocks::new(64);
        assert_eq!(blocks.block("k", 0), None);
        blocks.record("k", block(60 * SEC, 1, 120 * SEC), 0);
        assert_eq!(blocks.block("k", SEC), Some(block(60 * SEC, 1, 120 * SEC)));
        assert_eq!(
            blocks.block("other", SEC),
            None,
            "another key is not blocked"
        );
        assert_eq!(blocks.block("k", 120 * SEC), None, "forgotten");
    }

    #[test]
    fn keys_sharing_cells_only_lengthen_each_others_blocks() {
        let blocks = Blocks::new(64);
        blocks.record("k", block(60 * SEC, 1, 120 * SEC), 0);
        for i in 0..2_000 {
            blocks.record(&format!("flood{i}"), block(10 * SEC, 1, 20 * SEC), 0);
        }
        let read = blocks.block("k", SEC).expect("still blocked");
        assert!(read.until >= 60 * SEC && read.level >= 1 && read.forget_at >= 120 * SEC);
    }
}

//! The algorithms a limit can count with, behind one seam: each is one Lua file (`lua/`) and one
//! module here that registers it in [`REGISTRY`]: its config name, the bounds its arithmetic
//! needs, the suffix of its Redis key, and its in-process twin ([`KeyState`]) that the memory
//! store runs step for step as the script does. Nothing else in the request path names an
//! algorithm: the config, the scripts and the stores find them here by [`AlgorithmId`].
//!
//! ```text
//! lua/<name>.lua      open, view, fits, wait, charge, report, refund, confirm, settle, clear,
//!                     finish
//! <name>.rs           Algorithm (name, bounds, key suffix) + KeyState (the same steps in Rust)
//! ```

mod concurrency;
mod gcra;
mod seam;
mod sliding_log;
mod sliding_window_counter;

pub use seam::{Algorithm, KeyState, LimitParams, Settled, EXACT_IN_A_DOUBLE};

use std::fmt;

/// Every algorithm, by [`AlgorithmId`]: its place here is its code in the scripts (1-based).
pub static REGISTRY: [&dyn Algorithm; 4] = [
    &sliding_log::SlidingLog,
    &sliding_window_counter::SlidingWindowCounter,
    &gcra::Gcra,
    &concurrency::Concurrency,
];

/// An algorithm of [`REGISTRY`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AlgorithmId(u8);

impl AlgorithmId {
    /// `sliding_log`, the default.
    pub const SLIDING_LOG: AlgorithmId = AlgorithmId(0);
    /// `sliding_window_counter`.
    pub const SLIDING_WINDOW_COUNTER: AlgorithmId = AlgorithmId(1);
    /// `gcra`.
    pub const GCRA: AlgorithmId = AlgorithmId(2);
    /// `concurrency`.
    pub const CONCURRENCY: AlgorithmId = AlgorithmId(3);

    /// The algorithm named `name` in the config.
    pub fn by_name(name: &str) -> Option<AlgorithmId> {
        REGISTRY
            .iter()
            .position(|a| a.name() == name)
            .map(|i| AlgorithmId(i as u8))
    }

    /// Every algorithm, in registry order.
    pub fn all() -> impl Iterator<Item = AlgorithmId> {
        (0..REGISTRY.len()).map(|i| AlgorithmId(i as u8))
    }

    /// Every algorithm that counts in a window, in registry order.
    pub fn windowed() -> impl Iterator<Item = AlgorithmId> {
        Self::all().filter(|a| a.get().has_window())
    }

    /// The algorithm itself.
    pub fn get(self) -> &'static dyn Algorithm {
        REGISTRY[self.0 as usize]
    }

    /// Its config name.
    pub fn name(self) -> &'static str {
        self.get().name()
    }

    /// Its code in the scripts' `ALG` table.
    pub fn code(self) -> u8 {
        self.0 + 1
    }
}

impl fmt::Debug for AlgorithmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for AlgorithmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_find_their_algorithm_by_name_and_code() {
        for id in AlgorithmId::all() {
            assert_eq!(AlgorithmId::by_name(id.name()), Some(id));
            assert_eq!(REGISTRY[id.code() as usize - 1].name(), id.name());
        }
        assert_eq!(AlgorithmId::SLIDING_LOG.name(), "sliding_log");
        assert_eq!(AlgorithmId::GCRA.name(), "gcra");
        assert_eq!(AlgorithmId::CONCURRENCY.name(), "concurrency");
        assert!(AlgorithmId::windowed().all(|a| a != AlgorithmId::CONCURRENCY));
        assert!(AlgorithmId::by_name("leaky").is_none());
    }
}

//! The decision scripts, assembled at build time from `lua/`: the prelude (the call's instant),
//! the algorithm's own piece, and the shared multi-decision skeleton (`lua/decide.lua`). A route
//! whose limits use both algorithms gets a third script holding both pieces, each in a scope of
//! its own, joined by `lua/mixed.lua`. Each script exists in two forms: plain, and for Redis
//! Cluster with the `allow-cross-slot-keys` flag (Redis 7), which lets one call decide keys of
//! several slots served by one node.

use crate::config::Algorithm;
use crate::store::LimitSet;

/// The sliding-log script.
pub const SLIDING_LOG_LUA: &str = concat!(
    include_str!("../../../lua/prelude.lua"),
    include_str!("../../../lua/sliding_log.lua"),
    include_str!("../../../lua/decide.lua"),
);

/// The sliding-window-counter script.
pub const SLIDING_WINDOW_COUNTER_LUA: &str = concat!(
    include_str!("../../../lua/prelude.lua"),
    include_str!("../../../lua/sliding_window_counter.lua"),
    include_str!("../../../lua/decide.lua"),
);

/// An algorithm's file in a scope of its own, as a local table of the functions `decide.lua`
/// calls.
macro_rules! algorithm_scope {
    ($name:literal, $file:literal) => {
        concat!(
            "local ",
            $name,
            " = (function()\n",
            include_str!($file),
            "return { state_of = state_of, fits = fits, wait = wait, charge = charge, ",
            "report = report, finish = finish }\nend)()\n",
        )
    };
}

/// The script for a route whose limits use both algorithms.
pub const MIXED_LUA: &str = concat!(
    include_str!("../../../lua/prelude.lua"),
    algorithm_scope!("LOG", "../../../lua/sliding_log.lua"),
    algorithm_scope!("COUNTER", "../../../lua/sliding_window_counter.lua"),
    include_str!("../../../lua/mixed.lua"),
    include_str!("../../../lua/decide.lua"),
);

/// Which script decides a set of limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScriptKind {
    /// Every limit uses `sliding_log`.
    SlidingLog,
    /// Every limit uses `sliding_window_counter`.
    SlidingWindowCounter,
    /// The limits use both.
    Mixed,
}

impl ScriptKind {
    /// Every kind, in declaration order: a kind's `as usize` is its place here (lanes and
    /// scripts are kept in arrays indexed by it).
    pub const ALL: [ScriptKind; 3] = [
        ScriptKind::SlidingLog,
        ScriptKind::SlidingWindowCounter,
        ScriptKind::Mixed,
    ];

    /// The script that decides `set`.
    pub fn of(set: &LimitSet) -> ScriptKind {
        match set.algorithm() {
            Some(Algorithm::SlidingLog) => ScriptKind::SlidingLog,
            Some(Algorithm::SlidingWindowCounter) => ScriptKind::SlidingWindowCounter,
            None => ScriptKind::Mixed,
        }
    }

    fn lua(self) -> &'static str {
        match self {
            ScriptKind::SlidingLog => SLIDING_LOG_LUA,
            ScriptKind::SlidingWindowCounter => SLIDING_WINDOW_COUNTER_LUA,
            ScriptKind::Mixed => MIXED_LUA,
        }
    }
}

/// The shebang that declares the cross-slot flag (Redis 7 script flags).
const CROSS_SLOT_SHEBANG: &str = "#!lua flags=allow-cross-slot-keys\n";

/// A script's text and SHA-1, computed locally so `EVALSHA` never waits for a load.
pub struct Script {
    /// The Lua text.
    pub lua: String,
    /// Its SHA-1 in hex.
    pub sha: String,
}

impl Script {
    fn new(lua: String) -> Script {
        let sha = fred::util::sha1_hash(&lua);
        Script { lua, sha }
    }
}

/// Both forms of one script.
pub struct Scripts {
    /// For standalone and sentinel servers, and per-slot calls in a cluster.
    pub plain: Script,
    /// For calls that decide keys of several slots of one cluster node.
    pub cross_slot: Script,
}

impl Scripts {
    /// Both forms of the `kind` script.
    pub fn of(kind: ScriptKind) -> Scripts {
        let lua = kind.lua();
        Scripts {
            plain: Script::new(lua.to_string()),
            cross_slot: Script::new(format!("{CROSS_SLOT_SHEBANG}{lua}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_indexes_its_place_in_all() {
        for (i, kind) in ScriptKind::ALL.iter().enumerate() {
            assert_eq!(*kind as usize, i, "{kind:?}");
        }
    }
}

//! The decision scripts, assembled at build time from `lua/`: the prelude (the call's instant),
//! the algorithm's own piece, and the shared multi-decision skeleton (`lua/decide.lua`). Each
//! exists in two forms: plain, and for Redis Cluster with the `allow-cross-slot-keys` flag
//! (Redis 7), which lets one call decide keys of several slots served by one node.

use crate::config::Algorithm;

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

/// Both forms of one algorithm's script.
pub struct Scripts {
    /// For standalone and sentinel servers, and per-slot calls in a cluster.
    pub plain: Script,
    /// For calls that decide keys of several slots of one cluster node.
    pub cross_slot: Script,
}

impl Scripts {
    /// The scripts of `algorithm`.
    pub fn of(algorithm: Algorithm) -> Scripts {
        let lua = match algorithm {
            Algorithm::SlidingLog => SLIDING_LOG_LUA,
            Algorithm::SlidingWindowCounter => SLIDING_WINDOW_COUNTER_LUA,
        };
        Scripts {
            plain: Script::new(lua.to_string()),
            cross_slot: Script::new(format!("{CROSS_SLOT_SHEBANG}{lua}")),
        }
    }
}

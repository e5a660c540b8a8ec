//! The decision script, assembled from `lua/`: the prelude (the call's instant), every
//! registered algorithm's file in a scope of its own (`ALG[code]`, a table of its functions,
//! made on first use),
//! then the shared skeleton (`lua/decide.lua`). One script serves every route, so the decisions
//! in flight for one node share one lane whatever their algorithms. It exists in two forms:
//! plain, and for Redis Cluster with the `allow-cross-slot-keys` flag (Redis 7), which lets one
//! call decide keys of several slots served by one node.

use std::sync::OnceLock;

use crate::algorithm::AlgorithmId;

/// The functions every algorithm's file defines, which its scope returns.
const FUNCTIONS: [&str; 10] = [
    "open", "view", "fits", "wait", "charge", "report", "refund", "confirm", "clear", "finish",
];

/// The whole decision script's text.
pub fn decision_script() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let mut lua = String::from(include_str!("../../../lua/prelude.lua"));
        // Each algorithm's scope is made on its first use in a call: a call pays for the
        // algorithms its plans name, not for every registered one (making a scope creates its
        // closures, a few microseconds of every call otherwise).
        lua.push_str("local MAKE = {}\n");
        for id in AlgorithmId::all() {
            lua.push_str(&format!(
                "-- {name}\nMAKE[{code}] = function()\n{body}\nreturn {{ {fns} }}\nend\n",
                name = id.name(),
                code = id.code(),
                body = id.get().lua(),
                fns = FUNCTIONS
                    .iter()
                    .map(|f| format!("{f} = {f}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            ));
        }
        lua.push_str(
            "local ALG = setmetatable({}, { __index = function(made, code)\n  \
             local algorithm = MAKE[code]()\n  made[code] = algorithm\n  return algorithm\nend })\n",
        );
        lua.push_str(include_str!("../../../lua/decide.lua"));
        lua
    })
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

/// Both forms of the decision script.
pub struct Scripts {
    /// For standalone and sentinel servers, and calls per key in a cluster.
    pub plain: Script,
    /// For calls that decide keys of several slots of one cluster node.
    pub cross_slot: Script,
}

impl Scripts {
    /// Both forms.
    pub fn new() -> Scripts {
        let lua = decision_script();
        Scripts {
            plain: Script::new(lua.to_string()),
            cross_slot: Script::new(format!("{CROSS_SLOT_SHEBANG}{lua}")),
        }
    }
}

impl Default for Scripts {
    fn default() -> Self {
        Self::new()
    }
}

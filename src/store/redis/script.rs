//! The decision code, assembled from `lua/`: the prelude (helpers, the call's instant), every
//! registered algorithm's file in a scope of its own (`ALG[code]`, a table of its functions,
//! made on first use), then the shared skeleton (`lua/decide.lua`), which defines
//! `decide(KEYS, ARGV)`. One body serves every route, so the decisions in flight for one node
//! share one lane whatever their algorithms.
//!
//! The body is wrapped two ways ([`Scripts`]):
//! - a Redis Functions library (Redis 7+): `#!lua name=slidegate_<hash>`, registering
//!   `slidegate_decide_<hash>` with the `allow-cross-slot-keys` flag, loaded with
//!   `FUNCTION LOAD REPLACE` and called with `FCALL`. The body runs once per load (on the first
//!   call after it), so what it builds (helpers, scopes, parsed plans) is kept across calls. `<hash>` is the first 16 hex
//!   digits of the body's SHA-1: two gateway versions on one Redis each call their own library.
//! - a script run with `EVALSHA`, plain and (for Redis Cluster) with the `allow-cross-slot-keys`
//!   shebang, which lets one call decide keys of several slots served by one node. The whole
//!   body runs on every call.

use std::sync::OnceLock;

use crate::algorithm::AlgorithmId;

/// The functions every algorithm's file defines, which its scope returns.
const FUNCTIONS: [&str; 14] = [
    "begin",
    "open",
    "view",
    "fits",
    "wait",
    "charge",
    "report",
    "in_flight",
    "refund",
    "confirm",
    "unanswered",
    "settle",
    "clear",
    "finish",
];

/// The body shared by every form: helpers, algorithm scopes and `decide`; it expects a local
/// `LIBRARY` (whether it is kept across calls) declared before it.
fn body() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let mut lua = String::from(include_str!("../../../lua/prelude.lua"));
        // Each algorithm's scope is made on its first use: a script's call pays for the
        // algorithms its plans name, not for every registered one (making a scope creates its
        // closures, a few microseconds of every call otherwise); a library makes each once.
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

/// The whole decision script's text, as `EVALSHA` runs it.
pub fn decision_script() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        format!(
            "local LIBRARY = false\n{}return decide(KEYS, ARGV)\n",
            body()
        )
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

/// The Functions library: its code (for `FUNCTION LOAD REPLACE`) and its function's name (for
/// `FCALL`), both named after the body's hash.
pub struct Library {
    /// The library's code, shebang included.
    pub code: String,
    /// The library's name, `slidegate_<hash>`.
    pub name: String,
    /// The decision function's name, `slidegate_decide_<hash>`.
    pub function: String,
}

/// The decision code as a Functions library.
pub fn decision_library() -> &'static Library {
    static LIBRARY: OnceLock<Library> = OnceLock::new();
    LIBRARY.get_or_init(Library::new)
}

impl Library {
    fn new() -> Library {
        let body = body();
        let hash = &fred::util::sha1_hash(body)[..16];
        let name = format!("slidegate_{hash}");
        let function = format!("slidegate_decide_{hash}");
        // The body is made on the library's first call after a load, not at load: while a
        // library loads, Redis 7.0 lets its code see only `redis.register_function` and
        // `redis.log` (no `math`, `string`, `table`). One function serves plain and cross-slot
        // calls alike: the flag changes nothing for a call whose keys share a slot.
        let code = format!(
            "#!lua name={name}\nlocal LIBRARY = true\nlocal function make()\n{body}\
             return decide\nend\nlocal decide\n\
             redis.register_function{{ function_name = '{function}', \
             callback = function(keys, args)\n  \
             if decide == nil then decide = make() end\n  return decide(keys, args)\nend, \
             flags = {{ 'allow-cross-slot-keys' }} }}\n"
        );
        Library {
            code,
            name,
            function,
        }
    }
}

/// Every form of the decision code.
pub struct Scripts {
    /// For standalone and sentinel servers, and calls per key in a cluster (`EVALSHA`).
    pub plain: Script,
    /// For calls that decide keys of several slots of one cluster node (`EVALSHA`).
    pub cross_slot: Script,
    /// The Functions library (`FCALL`), for both kinds of calls.
    pub library: &'static Library,
}

impl Scripts {
    /// Every form.
    pub fn new() -> Scripts {
        let lua = decision_script();
        Scripts {
            plain: Script::new(lua.to_string()),
            cross_slot: Script::new(format!("{CROSS_SLOT_SHEBANG}{lua}")),
            library: decision_library(),
        }
    }
}

impl Default for Scripts {
    fn default() -> Self {
        Self::new()
    }
}

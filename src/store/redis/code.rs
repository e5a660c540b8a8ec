//! The decision code on the servers ([`Code`]): which form the calls run (`store.scripts`: the
//! Functions library, `FCALL`, or the scripts, `EVALSHA`), and loading it on every node, at
//! start and whenever a node says it lost it.
//!
//! `store.scripts = "auto"` uses the library where the server has Functions: loading it at
//! start tells (a server without them answers "unknown command"), and so does a call (a server
//! that lost the code after a restart is asked again: a script-run server may have become a
//! Redis 7, a library-run one an older Redis). `"functions"` never falls back; `"eval"` never
//! loads the library.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fred::error::Error as FredError;
use fred::interfaces::{ClientLike, LuaInterface};
use fred::types::{ClusterHash, CustomCommand, Value};

use super::direct::Direct;
use super::fred_error::map_error;
use super::fred_error::{is_noscript, lacks_functions};
use super::nodes::Nodes;
use super::resp::Reply;
use super::script::{Library, Script, Scripts};
use crate::config::ScriptsMode;
use crate::store::StoreError;

/// What every worker's code shares: the cross-slot switch, `store.scripts` and whether calls
/// use the Functions library.
#[derive(Clone)]
pub struct Shared {
    /// Whether cluster calls may carry several slots (see [`Code::cross_slot`]).
    cross_slot: Arc<AtomicBool>,
    /// `store.scripts`.
    mode: ScriptsMode,
    /// Whether calls use the Functions library now.
    functions: Arc<AtomicBool>,
}

impl Shared {
    /// Cross-slot calls on, and the library used unless `mode` is "eval".
    pub fn new(mode: ScriptsMode) -> Shared {
        Shared {
            cross_slot: Arc::new(AtomicBool::new(true)),
            mode,
            functions: Arc::new(AtomicBool::new(mode != ScriptsMode::Eval)),
        }
    }
}

/// One worker's view of the decision code on its nodes.
pub struct Code {
    nodes: Arc<Nodes>,
    scripts: Scripts,
    shared: Shared,
}

impl Code {
    /// The code on `nodes`, sharing `shared` with the other workers.
    pub fn new(nodes: Arc<Nodes>, shared: Shared) -> Code {
        Code {
            nodes,
            scripts: Scripts::new(),
            shared,
        }
    }

    /// Loads the code on every node: the Functions library (`store.scripts` "auto" on a
    /// server that has them, or "functions"), else the scripts.
    pub async fn load(&self) -> Result<(), StoreError> {
        if self.uses_functions() {
            match self.load_library().await {
                Ok(()) => return Ok(()),
                Err(e) if lacks_functions(&e) => self.without_functions(&e)?,
                Err(e) => return Err(map_error(e)),
            }
        }
        self.load_scripts().await
    }

    /// Whether calls go to the Functions library.
    pub fn uses_functions(&self) -> bool {
        self.shared.functions.load(Ordering::Relaxed)
    }

    /// Whether cluster lanes may carry several slots per call.
    pub fn cross_slot(&self) -> bool {
        self.shared.cross_slot.load(Ordering::Relaxed)
    }

    /// The library.
    pub fn library(&self) -> &Library {
        self.scripts.library
    }

    /// The script for a call: the cross-slot form, or the plain one.
    pub fn script(&self, cross_slot: bool) -> &Script {
        if cross_slot {
            &self.scripts.cross_slot
        } else {
            &self.scripts.plain
        }
    }

    /// A server answered that it has no Functions (`error`): with `store.scripts = "auto"`,
    /// calls run as scripts from now on; with "functions", that is an error.
    pub fn without_functions(&self, error: &FredError) -> Result<(), StoreError> {
        if self.shared.mode != ScriptsMode::Auto {
            return Err(StoreError::Unsupported(format!(
                "store.scripts = \"functions\" needs Redis Functions (Redis 7 or later, Valkey), \
                 and the server answered: {}",
                error.details()
            )));
        }
        if self.shared.functions.swap(false, Ordering::Relaxed) {
            tracing::info!(
                "Redis has no Functions (before Redis 7): decisions run as scripts (EVALSHA)"
            );
        }
        Ok(())
    }

    /// A script-run server lost its scripts (`error` is `NOSCRIPT`): with `store.scripts =
    /// "auto"`, the library is offered first (the server may have been upgraded); whether
    /// calls use it from now on.
    pub async fn after_noscript(&self, error: &FredError) -> bool {
        if !is_noscript(error) || self.shared.mode != ScriptsMode::Auto {
            return false;
        }
        let upgraded = self.load_library().await.is_ok();
        if upgraded {
            self.shared.functions.store(true, Ordering::Relaxed);
        }
        upgraded
    }

    /// Loads the library (with `script`, that script instead) again after a call found the
    /// server without it: on `direct`, the connection the call went on, while it is up (a
    /// restarted server that the library's client has not reconnected to yet is reached only
    /// there), else on every node the library's client reaches.
    pub async fn reload(
        &self,
        direct: Option<&Direct>,
        script: Option<&Script>,
    ) -> Result<(), StoreError> {
        if let Some(direct) = direct {
            let args: Vec<&[u8]> = match script {
                None => vec![
                    b"FUNCTION",
                    b"LOAD",
                    b"REPLACE",
                    self.library().code.as_bytes(),
                ],
                Some(s) => vec![b"SCRIPT", b"LOAD", s.lua.as_bytes()],
            };
            if let Some(reply) = direct.command(&args).await {
                return reply
                    .and_then(Reply::into_value)
                    .map(drop)
                    .map_err(map_error);
            }
        }
        match script {
            None => self.load_library().await.map_err(map_error),
            Some(s) => self.load_script(s).await,
        }
    }

    /// Loads the library with `FUNCTION LOAD REPLACE` on every node this worker reaches (a
    /// node that is down loads it on its first call once back).
    pub async fn load_library(&self) -> Result<(), FredError> {
        let code = self.scripts.library.code.as_str();
        let nodes = self.nodes.every_node().into_iter();
        let reachable = nodes.filter(|n| n.client.is_connected());
        let loads = reachable.map(|node| async move {
            let load = CustomCommand::new_static("FUNCTION", ClusterHash::Random, false);
            let args = vec![
                Value::from("LOAD"),
                Value::from("REPLACE"),
                Value::from(code),
            ];
            let loaded: Result<Value, FredError> = node.client.custom(load, args).await;
            loaded.map(|_| ())
        });
        futures_util::future::join_all(loads)
            .await
            .into_iter()
            .collect()
    }

    /// Loads the scripts on every node; a cross-slot form that does not load (Redis < 7) turns
    /// cross-slot calls off.
    async fn load_scripts(&self) -> Result<(), StoreError> {
        self.load_script(&self.scripts.plain).await?;
        if self.nodes.is_cluster() && self.cross_slot() {
            if let Err(e) = self.load_script(&self.scripts.cross_slot).await {
                tracing::warn!(error = %e, "Redis refused the cross-slot script (needs Redis 7); cluster decisions go one call per key");
                self.shared.cross_slot.store(false, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Loads `script` on every node this worker reaches (in a cluster, each primary that is
    /// connected: a node that is down loads it on its first call once back).
    pub async fn load_script(&self, script: &Script) -> Result<(), StoreError> {
        let nodes = self.nodes.every_node().into_iter();
        let reachable = nodes.filter(|n| n.client.is_connected());
        let loads = reachable.map(|node| async move {
            let loaded: Result<Value, FredError> =
                node.client.script_load(script.lua.as_str()).await;
            loaded.map(|_| ()).map_err(map_error)
        });
        futures_util::future::join_all(loads)
            .await
            .into_iter()
            .collect()
    }
}

//! The slot table every worker's cluster connections share ([`Topology`]), and its reading:
//! `CLUSTER SLOTS` from a node that answers, at start and then whenever a call meets `MOVED`
//! or a node's call fails ([`super::nodes::Nodes::request_refresh`]), one read at a time and at
//! most every [`REFRESH_PAUSE`], each bounded by [`REFRESH_TIMEOUT`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use fred::interfaces::ClientLike;
use fred::types::config::{Config as FredConfig, Server, ServerConfig};
use fred::types::{Builder, ClusterHash, CustomCommand, Value};
use futures_util::future::select_ok;
use tokio::runtime::Handle;

use super::fred_error::map_error;
use super::node::Node;
use super::slots::SlotTable;
use crate::store::StoreError;

/// The least time between the starts of two reads of the slot table.
pub const REFRESH_PAUSE: Duration = Duration::from_millis(100);
/// The most one read of the slot table (connecting included) may take.
pub const REFRESH_TIMEOUT: Duration = Duration::from_secs(1);

/// How a client for one server is made: the URL's settings with that server.
pub type MakeBuilder = Arc<dyn Fn(FredConfig) -> Builder + Send + Sync>;

/// What every worker's cluster connections share: the slot table and its reading.
pub struct Topology {
    make: MakeBuilder,
    base: FredConfig,
    seeds: Vec<Server>,
    table: ArcSwap<SlotTable>,
    /// Bumped whenever the table changes, so each worker drops the clients of nodes it lost.
    generation: AtomicU64,
    refreshing: AtomicBool,
    refreshed_at_ms: AtomicU64,
    started: Instant,
}

impl Topology {
    /// The topology of the cluster `base` (a cluster URL's settings) names; not read yet.
    pub fn new(base: FredConfig, make: MakeBuilder) -> Topology {
        let seeds = match &base.server {
            ServerConfig::Clustered { hosts, .. } => hosts.clone(),
            _ => Vec::new(),
        };
        Topology {
            make,
            base,
            seeds,
            table: ArcSwap::from_pointee(SlotTable::default()),
            generation: AtomicU64::new(0),
            refreshing: AtomicBool::new(false),
            refreshed_at_ms: AtomicU64::new(0),
            started: Instant::now(),
        }
    }

    /// The builder of a client for `server`.
    pub fn builder(&self, server: &Server) -> Builder {
        (self.make)(FredConfig {
            server: ServerConfig::Centralized {
                server: server.clone(),
            },
            ..self.base.clone()
        })
    }

    /// Replaces the table (a new generation when it routes differently); returns whether its
    /// primaries changed.
    fn store(&self, table: SlotTable) -> bool {
        let before = self.table.load_full();
        if before.same_as(&table) {
            return false;
        }
        let changed = before.primaries() != table.primaries();
        self.table.store(Arc::new(table));
        self.generation.fetch_add(1, Ordering::Relaxed);
        changed
    }

    /// The table as last read.
    pub fn table(&self) -> Arc<SlotTable> {
        self.table.load_full()
    }

    /// Bumped whenever the table changes.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// The nodes the URL names.
    pub fn seeds(&self) -> &[Server] {
        &self.seeds
    }

    /// Notes a `MOVED` reply: `slot` is served by `to` from now on.
    pub fn moved(&self, slot: u16, to: Server) {
        self.store(self.table.load().with_moved(slot, to));
    }

    /// Claims the next read of the table, unless one is under way or the last began less than
    /// [`REFRESH_PAUSE`] ago; [`Topology::release_refresh`] ends the claim.
    pub fn claim_refresh(&self) -> bool {
        let now_ms = self.started.elapsed().as_millis() as u64;
        let last = self.refreshed_at_ms.load(Ordering::Relaxed);
        if last != 0 && now_ms < last + REFRESH_PAUSE.as_millis() as u64 {
            return false;
        }
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.refreshed_at_ms.store(now_ms.max(1), Ordering::Relaxed);
        true
    }

    /// Ends a claim of [`Topology::claim_refresh`].
    pub fn release_refresh(&self) {
        self.refreshing.store(false, Ordering::Release);
    }
}

/// Reads the table ([`read_from`]) and keeps it in `topology`; says so in the log when its
/// primaries changed.
pub async fn renew(
    topology: &Topology,
    (connected, others): (Vec<Node>, Vec<Server>),
) -> Result<(), StoreError> {
    let table = read_from(topology, connected, others).await?;
    if topology.store(table) {
        let primaries = topology.table().primaries();
        let primaries: Vec<String> = primaries.iter().map(|s| s.to_string()).collect();
        tracing::info!(
            primaries = %primaries.join(","),
            "Redis Cluster slot table read: {} primaries",
            primaries.len()
        );
    }
    Ok(())
}

/// The slot table from the first node that answers `CLUSTER SLOTS`: the `connected` ones one
/// after another, else all of `others` at once, each on a client made for this read (and
/// closed after it) that waits for its connection.
async fn read_from(
    topology: &Topology,
    connected: Vec<Node>,
    others: Vec<Server>,
) -> Result<SlotTable, StoreError> {
    let mut last = None;
    for node in &connected {
        match ask_slots(node, false).await {
            Ok(table) => return Ok(table),
            Err(e) => last = Some(e),
        }
    }
    let here = Handle::current();
    let temporary: Vec<Node> = others
        .iter()
        .filter_map(|s| Node::start(&topology.builder(s), Some(s.clone()), &here, None).ok())
        .collect();
    if temporary.is_empty() {
        return Err(last.unwrap_or_else(|| StoreError::Connection("no cluster node to ask".into())));
    }
    let read = select_ok(temporary.iter().map(|n| Box::pin(ask_slots(n, true)))).await;
    for node in &temporary {
        node.retire();
    }
    read.map(|(table, _)| table)
}

/// `CLUSTER SLOTS` of one node, within [`REFRESH_TIMEOUT`] (waiting for its connection first
/// when `connect`).
async fn ask_slots(node: &Node, connect: bool) -> Result<SlotTable, StoreError> {
    let server = node.server.clone().expect("a cluster node has a server");
    let ask = async {
        if connect {
            node.connected().await?;
        }
        let command = CustomCommand::new_static("CLUSTER", ClusterHash::Random, false);
        let reply: Value = node
            .client
            .custom(command, vec![Value::from("SLOTS")])
            .await
            .map_err(map_error)?;
        SlotTable::from_reply(reply, &server).map_err(StoreError::Other)
    };
    match tokio::time::timeout(REFRESH_TIMEOUT, ask).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::Timeout(REFRESH_TIMEOUT)),
    }
}

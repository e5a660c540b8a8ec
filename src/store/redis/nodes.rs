//! One worker's connections to Redis: the one client of a standalone server or of a sentinel's
//! master, or in a cluster one client per primary, each with a connection of its own. A node
//! that dies or hangs then stalls only the calls for its own slots: the others' connections
//! never notice. The slot table is shared by every worker ([`Topology`]).
//!
//! Differences from the client library's own cluster client: that one drives every node from
//! one task and reconnects the cluster as a whole (it connects to every node of the slot table
//! or to none), so while a dead master is still in the table, until its replica is promoted,
//! no command goes out to any node. Here a dead node's client retries alone, and the table is
//! read again (`CLUSTER SLOTS`, from a node that answers) whenever a call meets `MOVED` or a
//! node's call fails, at most every [`REFRESH_PAUSE`]: a promoted replica is found within that
//! pause of the surviving nodes learning of it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::config::{Config as FredConfig, Server, ServerConfig};
use fred::types::{Builder, ClusterHash, CustomCommand, Value};
use futures_util::future::select_ok;
use tokio::runtime::Handle;

use super::answer::map_error;
use super::keeper;
use super::slots::SlotTable;
use crate::store::StoreError;

/// The least time between two reads of the slot table.
pub const REFRESH_PAUSE: Duration = Duration::from_millis(100);
/// The most one read of the slot table (connecting included) may take.
pub const REFRESH_TIMEOUT: Duration = Duration::from_secs(1);
/// How long after its creation a node's client is still waiting for its first connection: a
/// call to it waits for that (within its deadline) instead of failing at once.
const FIRST_CONNECT: Duration = Duration::from_secs(1);

/// How a client for one server is made: the URL's settings with that server.
pub type MakeBuilder = Arc<dyn Fn(FredConfig) -> Builder + Send + Sync>;

/// A client with one connection to one server.
#[derive(Clone)]
pub struct Node {
    /// The client.
    pub client: Client,
    /// Its cluster node (`None`: a standalone server or a sentinel's master).
    pub server: Option<Server>,
    /// Set once the node left the slot table: its connection is closed, not restarted.
    retired: Arc<AtomicBool>,
    born: Instant,
}

impl Node {
    /// Builds the client and connects it on `handle`'s runtime (its I/O is driven there); a
    /// keeper starts its connection task again whenever it ends, until the node is retired.
    pub fn start(
        builder: &Builder,
        server: Option<Server>,
        handle: &Handle,
    ) -> Result<Node, StoreError> {
        let client = builder
            .build()
            .map_err(|e| StoreError::Other(e.to_string()))?;
        let node = Node {
            client,
            server,
            retired: Arc::new(AtomicBool::new(false)),
            born: Instant::now(),
        };
        let _entered = handle.enter();
        let task = node.client.connect();
        let (client, retired) = (node.client.clone(), node.retired.clone());
        keeper::keep_connected(task, move || {
            (!retired.load(Ordering::Relaxed)).then(|| client.connect())
        });
        Ok(node)
    }

    /// Whether its first connection may still be on its way (a call waits for it).
    pub fn is_connecting(&self) -> bool {
        !self.client.is_connected() && self.born.elapsed() < FIRST_CONNECT
    }

    /// Closes its connection for good.
    fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
        let client = self.client.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(REFRESH_TIMEOUT, client.quit()).await;
        });
    }
}

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
    fn builder(&self, server: &Server) -> Builder {
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

    /// Claims the next read of the table, unless one is under way or the last began less than
    /// [`REFRESH_PAUSE`] ago.
    fn claim_refresh(&self) -> bool {
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
}

/// One worker's connections.
pub struct Nodes {
    handle: Handle,
    kind: Kind,
}

enum Kind {
    /// A standalone server, or the master the sentinels name (the client follows them).
    Single(Node),
    /// A cluster: a client per primary, made when first needed.
    Cluster {
        topology: Arc<Topology>,
        clients: RwLock<HashMap<Server, Node>>,
        /// The table generation the clients were last pruned for.
        pruned_for: AtomicU64,
    },
}

impl Nodes {
    /// The connection to one server (standalone or sentinel), made on `handle`'s runtime.
    pub fn single(builder: &Builder, handle: Handle) -> Result<Nodes, StoreError> {
        let node = Node::start(builder, None, &handle)?;
        Ok(Nodes {
            handle,
            kind: Kind::Single(node),
        })
    }

    /// A worker's connections to the cluster `topology` describes; each client is made on
    /// `handle`'s runtime when first needed.
    pub fn cluster(topology: Arc<Topology>, handle: Handle) -> Nodes {
        Nodes {
            handle,
            kind: Kind::Cluster {
                topology,
                clients: RwLock::new(HashMap::new()),
                pruned_for: AtomicU64::new(0),
            },
        }
    }

    /// Whether these are a cluster's.
    pub fn is_cluster(&self) -> bool {
        matches!(self.kind, Kind::Cluster { .. })
    }

    /// The slot table (`None` outside a cluster).
    pub fn table(&self) -> Option<Arc<SlotTable>> {
        match &self.kind {
            Kind::Single(_) => None,
            Kind::Cluster { topology, .. } => Some(topology.table.load_full()),
        }
    }

    /// The table's generation (0 outside a cluster): it changes whenever the table does.
    pub fn generation(&self) -> u64 {
        match &self.kind {
            Kind::Single(_) => 0,
            Kind::Cluster { topology, .. } => topology.generation.load(Ordering::Relaxed),
        }
    }

    /// The node that serves `slot`: the one server, or the slot's primary in the table
    /// (`None` while the table does not know it).
    pub fn for_slot(&self, slot: u16) -> Option<Node> {
        match &self.kind {
            Kind::Single(node) => Some(node.clone()),
            Kind::Cluster { topology, .. } => {
                let server = topology.table.load().primary(slot)?.clone();
                Some(self.node(&server))
            }
        }
    }

    /// The client of a cluster node, made now if this worker has none (outside a cluster, the
    /// one server's).
    pub fn node(&self, server: &Server) -> Node {
        let (topology, clients) = match &self.kind {
            Kind::Single(node) => return node.clone(),
            Kind::Cluster {
                topology, clients, ..
            } => (topology, clients),
        };
        self.prune();
        if let Some(node) = clients
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(server)
        {
            return node.clone();
        }
        let mut clients = clients.write().unwrap_or_else(|e| e.into_inner());
        if let Some(node) = clients.get(server) {
            return node.clone();
        }
        let builder = topology.builder(server);
        let node = Node::start(&builder, Some(server.clone()), &self.handle)
            .expect("a client for a node of a valid cluster URL builds");
        clients.insert(server.clone(), node.clone());
        node
    }

    /// Every node this worker serves decisions from: the one server, or each primary of the
    /// table.
    pub fn every_node(&self) -> Vec<Node> {
        match &self.kind {
            Kind::Single(node) => vec![node.clone()],
            Kind::Cluster { topology, .. } => topology
                .table
                .load()
                .primaries()
                .iter()
                .map(|s| self.node(s))
                .collect(),
        }
    }

    /// Notes a `MOVED` reply: `slot` is served by `to` from now on, and the table is read again.
    pub fn moved(&self, slot: u16, to: Server) {
        if let Kind::Cluster { topology, .. } = &self.kind {
            let patched = topology.table.load().with_moved(slot, to);
            topology.store(patched);
            self.request_refresh();
        }
    }

    /// Asks for the slot table to be read again, in the background (a call to a cluster node
    /// failed on its connection, timed out or was refused: a failover may have changed the
    /// table). At most one read is under way, and reads begin [`REFRESH_PAUSE`] apart.
    pub fn request_refresh(&self) {
        let Kind::Cluster { topology, .. } = &self.kind else {
            return;
        };
        if !topology.claim_refresh() {
            return;
        }
        let (topology, candidates) = (topology.clone(), self.candidates());
        self.handle.spawn(async move {
            if let Err(e) = renew(&topology, candidates).await {
                tracing::debug!(error = %e, "reading the cluster slot table failed");
            }
            topology.refreshing.store(false, Ordering::Release);
        });
    }

    /// Reads the slot table now (at start; after that, [`Nodes::request_refresh`]).
    pub async fn refresh(&self) -> Result<(), StoreError> {
        let Kind::Cluster { topology, .. } = &self.kind else {
            return Ok(());
        };
        // Boxed: a future of its own rather than a layer of every caller's.
        Box::pin(renew(topology, self.candidates())).await?;
        self.prune();
        Ok(())
    }

    /// Where to read the table: this worker's connected primaries, then (each on a client of
    /// its own, for that read only) the other primaries and the URL's seed nodes.
    fn candidates(&self) -> (Vec<Node>, Vec<Server>) {
        let Kind::Cluster {
            topology, clients, ..
        } = &self.kind
        else {
            return (Vec::new(), Vec::new());
        };
        let clients = clients.read().unwrap_or_else(|e| e.into_inner());
        let mut connected = Vec::new();
        let mut others = Vec::new();
        for server in topology.table.load().primaries() {
            match clients.get(&server) {
                Some(node) if node.client.is_connected() => connected.push(node.clone()),
                _ => others.push(server),
            }
        }
        for seed in &topology.seeds {
            if !others.contains(seed) && !connected.iter().any(|n| n.server.as_ref() == Some(seed))
            {
                others.push(seed.clone());
            }
        }
        (connected, others)
    }

    /// Drops the clients of nodes that are no longer primaries, once per table change.
    fn prune(&self) {
        let Kind::Cluster {
            topology,
            clients,
            pruned_for,
        } = &self.kind
        else {
            return;
        };
        let generation = topology.generation.load(Ordering::Relaxed);
        if pruned_for.swap(generation, Ordering::Relaxed) == generation {
            return;
        }
        let table = topology.table.load();
        if !table.is_known() {
            return;
        }
        let primaries = table.primaries();
        clients
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|server, node| {
                let keep = primaries.contains(server);
                if !keep {
                    node.retire();
                }
                keep
            });
    }
}

/// Reads the table ([`read_from`]) and keeps it in `topology`; says so in the log when its
/// primaries changed.
async fn renew(
    topology: &Topology,
    (connected, others): (Vec<Node>, Vec<Server>),
) -> Result<(), StoreError> {
    let table = read_from(topology, connected, others).await?;
    if topology.store(table) {
        let primaries = topology.table.load().primaries();
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
        .filter_map(|s| Node::start(&topology.builder(s), Some(s.clone()), &here).ok())
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
            node.client.wait_for_connect().await.map_err(map_error)?;
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

//! One worker's connections to Redis ([`Nodes`]): the one client of a standalone server or of a
//! sentinel's master, or in a cluster one client per primary, each with a connection of its
//! own. A node that dies or hangs then stalls only the calls for its own slots: the others'
//! connections never notice. The slot table is shared by every worker ([`Topology`]).
//!
//! Differences from the client library's own cluster client: that one drives every node from
//! one task and reconnects the cluster as a whole (it connects to every node of the slot table
//! or to none), so while a dead master is still in the table, until its replica is promoted,
//! no command goes out to any node. Here a dead node's client retries alone, and the table is
//! read again whenever a call meets `MOVED` or a node's call fails: a promoted replica is found
//! within [`super::topology::REFRESH_PAUSE`] of the surviving nodes learning of it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use fred::interfaces::ClientLike;
use fred::types::config::Server;
use fred::types::Builder;
use tokio::runtime::Handle;

use super::node::{Node, ReplicaWatch};
use super::sentinel_watch::SentinelWatch;
use super::slots::SlotTable;
use super::topology::{renew, Topology, REFRESH_PAUSE};
use crate::store::StoreError;

/// One worker's connections.
pub struct Nodes {
    handle: Handle,
    kind: Kind,
    /// A sentinel's master: follows the sentinels' announcements, and asks them after a failed
    /// call ([`SentinelWatch`]).
    sentinel: Option<Arc<SentinelWatch>>,
    /// With `store.replica_acks` above 0: each node's replicas are watched.
    replicas: Option<ReplicaWatch>,
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
    /// The connection to one server (standalone or sentinel), made on `handle`'s runtime;
    /// with `replicas`, its replicas are watched.
    pub fn single(
        builder: &Builder,
        handle: Handle,
        replicas: Option<ReplicaWatch>,
    ) -> Result<Nodes, StoreError> {
        let node = Node::start(builder, None, &handle, replicas.as_ref())?;
        let sentinel = SentinelWatch::of(&node);
        if let Some(watch) = &sentinel {
            watch.listen(&handle);
        }
        Ok(Nodes {
            handle,
            sentinel,
            kind: Kind::Single(node),
            replicas,
        })
    }

    /// A worker's connections to the cluster `topology` describes; each client is made on
    /// `handle`'s runtime when first needed (with `replicas`, each one's replicas watched).
    pub fn cluster(
        topology: Arc<Topology>,
        handle: Handle,
        replicas: Option<ReplicaWatch>,
    ) -> Nodes {
        Nodes {
            handle,
            replicas,
            sentinel: None,
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
            Kind::Cluster { topology, .. } => Some(topology.table()),
        }
    }

    /// The table's generation (0 outside a cluster): it changes whenever the table does.
    pub fn generation(&self) -> u64 {
        match &self.kind {
            Kind::Single(_) => 0,
            Kind::Cluster { topology, .. } => topology.generation(),
        }
    }

    /// The node that serves `slot`: the one server, or the slot's primary in the table
    /// (`None` while the table does not know it).
    pub fn for_slot(&self, slot: u16) -> Option<Node> {
        match &self.kind {
            Kind::Single(node) => Some(node.clone()),
            Kind::Cluster { topology, .. } => {
                let server = topology.table().primary(slot)?.clone();
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
        let node = Node::start(
            &builder,
            Some(server.clone()),
            &self.handle,
            self.replicas.as_ref(),
        )
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
                .table()
                .primaries()
                .iter()
                .map(|s| self.node(s))
                .collect(),
        }
    }

    /// Notes a `MOVED` reply: `slot` is served by `to` from now on, and the table is read again.
    pub fn moved(&self, slot: u16, to: Server) {
        if let Kind::Cluster { topology, .. } = &self.kind {
            topology.moved(slot, to);
            self.request_refresh();
        }
    }

    /// The node serving `slot` once the slot table names another primary than `from` (a
    /// primary a failover demoted answers `READONLY`, and the cluster may not have told this
    /// worker yet): the table is read again, at most every [`REFRESH_PAUSE`], for up to
    /// `within`; `None` outside a cluster or when it still names `from`.
    pub async fn new_primary(&self, slot: u16, from: &Server, within: Duration) -> Option<Node> {
        let Kind::Cluster { topology, .. } = &self.kind else {
            return None;
        };
        let until = Instant::now() + within;
        loop {
            let primary = topology.table().primary(slot).cloned();
            if let Some(primary) = primary.filter(|p| p != from) {
                return Some(self.node(&primary));
            }
            if Instant::now() >= until {
                return None;
            }
            self.request_refresh();
            tokio::time::sleep(REFRESH_PAUSE).await;
        }
    }

    /// Notes a failed call: when it says its node may no longer be the one to use (the store
    /// counts it as unavailable: the connection failed or timed out, the node is a replica now,
    /// the cluster is failing over), a cluster's table is read again, and a sentinel's master
    /// checked against the one the sentinels name.
    pub fn note_failure(&self, error: &StoreError) {
        if !matches!(error, StoreError::Connection(_) | StoreError::Timeout(_)) {
            return;
        }
        match (&self.kind, &self.sentinel) {
            (Kind::Single(_), Some(watch)) => watch.after_failure(&self.handle),
            _ => self.request_refresh(),
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
            topology.release_refresh();
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
        for server in topology.table().primaries() {
            match clients.get(&server) {
                Some(node) if node.client.is_connected() => connected.push(node.clone()),
                _ => others.push(server),
            }
        }
        for seed in topology.seeds() {
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
        let generation = topology.generation();
        if pruned_for.swap(generation, Ordering::Relaxed) == generation {
            return;
        }
        let table = topology.table();
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

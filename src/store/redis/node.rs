//! One client with one connection to one Redis server (a standalone server, a sentinel's
//! master, or one cluster node), connected on a given worker's runtime and kept connected
//! until it is retired; and the connection settings every client of the store gets.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::clients::Client;
use fred::interfaces::{ClientLike, EventInterface};
use fred::types::config::{Config as FredConfig, ConnectionConfig, ReconnectPolicy, Server};
use fred::types::Builder;
use tokio::runtime::Handle;

use super::fred_error::map_error;
use super::keeper;
use super::replicas::{self, ReplicaBook, Replicas};
use crate::store::StoreError;

/// How long after its creation a node's client is still waiting for its first connection: a
/// call to it waits for that (within its deadline) instead of failing at once.
const FIRST_CONNECT: Duration = Duration::from_secs(1);
/// The most a retired client's `QUIT` is waited for.
const QUIT_WAIT: Duration = Duration::from_secs(1);
/// How often a client being waited for is asked whether its server refused the credentials.
const REFUSAL_POLL: Duration = Duration::from_millis(20);
/// A broken connection is tried again at once, then after 50 ms, doubling up to this: the most
/// a server that is back (a master the sentinels name after a failover, a restarted one) goes
/// unused. Low because each try is one cheap connect (or one question to a sentinel) per
/// client, and every decision of the node fails over to `on_error` meanwhile.
const RECONNECT_MAX_DELAY_MS: u32 = 250;

/// A client builder with the store's connection settings.
pub fn builder(config: FredConfig) -> Builder {
    let mut builder = Builder::from_config(config);
    builder
        .with_connection_config(|c: &mut ConnectionConfig| {
            c.connection_timeout = Duration::from_secs(1);
            c.internal_command_timeout = Duration::from_secs(1);
            // Without it, a call written while another is unacknowledged (a batch's second
            // call, an admin command beside a decision) waits in the kernel for the first
            // reply, which carries Redis's delayed ACK: Nagle's algorithm undoing pipelining.
            c.tcp.nodelay = Some(true);
        })
        .set_policy(ReconnectPolicy::new_exponential(
            0,
            50,
            RECONNECT_MAX_DELAY_MS,
            2,
        ));
    builder
}

/// What watching every node's replicas takes (`store.replica_acks` > 0): the setting, and the
/// book that every worker's connections share.
#[derive(Debug, Clone)]
pub struct ReplicaWatch {
    /// `store.replica_acks`.
    pub configured: u32,
    /// Each node's replicas.
    pub book: Arc<ReplicaBook>,
}

/// A client with one connection to one server.
#[derive(Clone)]
pub struct Node {
    /// The client.
    pub client: Client,
    /// Its cluster node (`None`: a standalone server or a sentinel's master).
    pub server: Option<Server>,
    /// Its replicas as last seen, shared with every worker's connection to the same node (kept
    /// up to date only with `store.replica_acks`).
    pub replicas: Arc<Replicas>,
    /// Set once the node left the slot table: its connection is closed, not restarted.
    retired: Arc<AtomicBool>,
    born: Instant,
    /// Why its last try to connect failed, while it is not connected (a refused password, a
    /// refused connection): what a wait for it that runs out reports, not a bare timeout.
    failure: Arc<Mutex<Option<StoreError>>>,
}

impl Node {
    /// Builds the client and connects it on `handle`'s runtime (its I/O is driven there); a
    /// keeper starts its connection task again whenever it ends, until the node is retired.
    /// With `replicas` (`store.replica_acks` > 0, and the book of every node's replicas), its
    /// replicas are the book's entry for its node, and watched ([`replicas::watch`]).
    pub fn start(
        builder: &Builder,
        server: Option<Server>,
        handle: &Handle,
        replicas: Option<&ReplicaWatch>,
    ) -> Result<Node, StoreError> {
        let client = builder
            .build()
            .map_err(|e| StoreError::Other(e.to_string()))?;
        let node = Node {
            client,
            replicas: replicas.map_or_else(Arc::default, |w| w.book.of(server.as_ref())),
            server,
            retired: Arc::new(AtomicBool::new(false)),
            born: Instant::now(),
            failure: Arc::default(),
        };
        let _entered = handle.enter();
        if let Some(watch) = replicas {
            replicas::watch(
                &node.client,
                &node.replicas,
                watch.configured,
                node.retired.clone(),
            );
        }
        remember_failures(&node.client, &node.failure);
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

    /// Why it is not connected, when a try to connect failed since its last connection.
    pub fn failure(&self) -> Option<StoreError> {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .filter(|_| !self.client.is_connected())
    }

    /// Waits for its connection; a server that refused the credentials (`WRONGPASS`) says so
    /// at once rather than once the caller's wait runs out (the client keeps trying meanwhile).
    pub async fn connected(&self) -> Result<(), StoreError> {
        let connected = self.client.wait_for_connect();
        tokio::pin!(connected);
        loop {
            tokio::select! {
                done = &mut connected => return done.map_err(map_error),
                _ = tokio::time::sleep(REFUSAL_POLL) => {
                    if let Some(refused @ StoreError::Refused(_)) = self.failure() {
                        return Err(refused);
                    }
                }
            }
        }
    }

    /// Closes its connection for good (its keeper does not start it again).
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
        let client = self.client.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(QUIT_WAIT, client.quit()).await;
        });
    }
}

/// Keeps in `failure` the error of `client`'s latest failed try to connect, until it connects;
/// ends with the client (its channels close) or once `failure` is dropped.
fn remember_failures(client: &Client, failure: &Arc<Mutex<Option<StoreError>>>) {
    let (mut errors, mut connections) = (client.error_rx(), client.reconnect_rx());
    let failure = Arc::downgrade(failure);
    tokio::spawn(async move {
        loop {
            let now = tokio::select! {
                error = errors.recv() => match error {
                    Ok((error, _)) => Some(map_error(error)),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                },
                connection = connections.recv() => match connection {
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    _ => None,
                },
            };
            let Some(failure) = failure.upgrade() else {
                return;
            };
            *failure.lock().unwrap_or_else(|e| e.into_inner()) = now;
        }
    });
}

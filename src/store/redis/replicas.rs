//! What the gateway knows of one master's replicas ([`Replicas`]), for `store.replica_acks`:
//! the count `ROLE` gave after the connection (re)connected (a new master after a failover, or
//! the same one again), raised whenever a `WAIT` reply counts more. The wait asks for
//! `store.replica_acks` replicas or for every replica the master has, whichever is fewer
//! ([`Replicas::wanted`]): a master left without replicas by a failover has nothing to fail over
//! to, so waiting for one would only send every decision to `on_error`.
//!
//! Differences from asking `ROLE` before each wait: the count is learned when the topology may
//! have changed (each connection the client makes, [`watch`]), after a `WAIT` that came back
//! short ([`Replicas::short`]), and once every [`ROLE_POLL`] (how a replica that attaches is
//! seen: a `WAIT` that asks for fewer cannot count it; and how a replica lost while no request
//! came is taken as lost before the next one, not [`LOST_AFTER`] after it), never on a
//! decision's path. A short `WAIT` lowers nothing by itself: a replica that lags is still the
//! master's (`ROLE` lists it) and may be the one a failover promotes, so the wait keeps asking
//! for it. A replica whose link broke is gone from `ROLE`
//! but may still be promoted (a master that dies right after cutting its replicas off is the
//! case acknowledgements exist for), so the wait keeps asking for it for [`LOST_AFTER`]; once
//! `ROLE` has not listed it for that long with no failover, it is taken as lost and no longer
//! asked for (without that, a replica that died with no failover would send every allowed
//! decision to `on_error` until the next reconnection).
//!
//! A short `WAIT` marks the replicas as lagging ([`Replicas::lagging`]: later waits are
//! probes, see [`super::acks`]) until a `WAIT` counts enough of them, or until `ROLE`, read on
//! every [`ROLE_POLL`] meanwhile, shows that enough of them hold what the master had
//! written at the read before (a replica slower than a probe but within `store.timeout`).
//!
//! A master's replicas are the master's, not a connection's: every worker's connection to one
//! node shares one [`Replicas`] ([`ReplicaBook`]), so a loss one worker's `ROLE` read takes is
//! taken by every worker at once. Without that, a worker that met no short `WAIT` would go on
//! asking for the lost replica, and decisions would alternate between allowed and `on_error`
//! by the worker a connection landed on, for up to another [`LOST_AFTER`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use fred::clients::Client;
use fred::interfaces::{ClientLike, EventInterface};
use fred::types::config::Server;
use fred::types::{ClusterHash, CustomCommand, Value};
use tokio::sync::Notify;

/// How often `ROLE` is read.
pub const ROLE_POLL: Duration = Duration::from_secs(1);
/// How long a replica may be missing from `ROLE`, with no failover, before the wait stops
/// asking for it.
pub const LOST_AFTER: Duration = Duration::from_secs(5);
/// The most one `ROLE` read may take.
const ROLE_TIMEOUT: Duration = Duration::from_secs(1);
/// `seen` before the first `ROLE` reply of a connection.
const UNKNOWN: u32 = u32::MAX;

/// One master's replicas, as last seen on one connection.
#[derive(Debug)]
pub struct Replicas {
    seen: AtomicU32,
    /// Counts the connections made (`connected`): a `WAIT` reply counts for the connection it
    /// was sent on only. A reply that comes late on a connection since replaced (an old master
    /// that wakes after a failover) says nothing of the new master's replicas.
    connection: AtomicU64,
    /// The master's address, as the connection reached it.
    server: Mutex<Option<String>>,
    /// Wakes the watch to read `ROLE` again (a `WAIT` came back short).
    recheck: Arc<Notify>,
    /// Since when `ROLE` has listed fewer replicas than `seen` (not yet taken as lost).
    fewer_since: Mutex<Option<Instant>>,
    /// A `WAIT` came back short, and none has counted enough since.
    lagging: AtomicBool,
    /// While lagging: the master's replication offset at the last `ROLE` read.
    lag_mark: Mutex<Option<u64>>,
}

/// Each node's [`Replicas`], shared by every worker's connection to it: a cluster node by its
/// address, the one server of a standalone or sentinel store (`None`) as one. An entry lives as
/// long as some worker's connection to its node does.
#[derive(Debug, Default)]
pub struct ReplicaBook {
    nodes: Mutex<HashMap<Option<Server>, Weak<Replicas>>>,
}

impl ReplicaBook {
    /// The replicas of `node` (`None`: the one server), shared with every other worker's
    /// connection to it.
    pub fn of(&self, node: Option<&Server>) -> Arc<Replicas> {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(replicas) = nodes.get(&node.cloned()).and_then(Weak::upgrade) {
            return replicas;
        }
        nodes.retain(|_, replicas| replicas.strong_count() > 0);
        let replicas = Arc::new(Replicas::default());
        nodes.insert(node.cloned(), Arc::downgrade(&replicas));
        replicas
    }
}

impl Default for Replicas {
    fn default() -> Replicas {
        Replicas {
            seen: AtomicU32::new(UNKNOWN),
            connection: AtomicU64::new(0),
            server: Mutex::new(None),
            recheck: Arc::new(Notify::new()),
            fewer_since: Mutex::new(None),
            lagging: AtomicBool::new(false),
            lag_mark: Mutex::new(None),
        }
    }
}

impl Replicas {
    /// Replicas a wait asks for when `store.replica_acks` is `configured`: as many, or every
    /// replica the master has when it has fewer (as many while that is not known yet).
    pub fn wanted(&self, configured: u32) -> u32 {
        configured.min(self.seen.load(Ordering::Relaxed))
    }

    /// The master's address and its replicas, once a `ROLE` reply told them.
    pub fn seen(&self) -> Option<(String, u32)> {
        let seen = self.seen.load(Ordering::Relaxed);
        let server = self
            .server
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        (seen != UNKNOWN)
            .then_some(server)
            .flatten()
            .map(|s| (s, seen))
    }

    /// The connection a `WAIT` sent now goes out on, as [`Replicas::acknowledged`] takes it.
    pub fn connection(&self) -> u64 {
        self.connection.load(Ordering::Acquire)
    }

    /// Notes a `WAIT` reply sent on `connection`: `acknowledged` replicas hold the write, so
    /// the master has at least that many (nothing, when the connection has been replaced since).
    pub fn acknowledged(&self, acknowledged: u32, connection: u64) {
        if connection != self.connection() {
            return;
        }
        let _ = self
            .seen
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |seen| {
                (seen == UNKNOWN || seen < acknowledged).then_some(acknowledged)
            });
    }

    /// Notes a `WAIT` that came back with fewer acknowledgements than it asked for: the
    /// replicas lag until one counts enough, and the watch reads `ROLE` again soon, apart from
    /// any decision (several such waits, one read).
    pub fn short(&self) {
        self.lagging.store(true, Ordering::Relaxed);
        self.recheck.notify_one();
    }

    /// Whether the replicas lag: a `WAIT` came back short, and neither a `WAIT` nor `ROLE` has
    /// shown them caught up since.
    pub fn lagging(&self) -> bool {
        self.lagging.load(Ordering::Relaxed)
    }

    /// Notes a `WAIT` sent on `connection` that counted enough replicas: they keep up.
    pub fn caught_up(&self, connection: u64) {
        if connection == self.connection() {
            self.end_lag();
        }
    }

    fn end_lag(&self) {
        self.lagging.store(false, Ordering::Relaxed);
        *self.lag_mark.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Notes a `ROLE` read while lagging: the lag ends once `configured` replicas (or every
    /// one the wait asks for) hold what the master had written at the read before.
    fn offsets_read(&self, offsets: &Offsets, configured: u32) {
        if !self.lagging() {
            return;
        }
        let mut mark = self.lag_mark.lock().unwrap_or_else(|e| e.into_inner());
        let wanted = self.wanted(configured) as usize;
        let caught_up =
            mark.is_some_and(|m| offsets.replicas.iter().filter(|&&o| o >= m).count() >= wanted);
        match caught_up {
            true => {
                drop(mark);
                self.end_lag();
            }
            false => *mark = Some(offsets.master),
        }
    }

    /// A new connection, to `server`: nothing is known of its replicas until `ROLE` answers.
    fn connected(&self, server: String) {
        *self.server.lock().unwrap_or_else(|e| e.into_inner()) = Some(server);
        self.connection.fetch_add(1, Ordering::AcqRel);
        self.seen.store(UNKNOWN, Ordering::Relaxed);
        self.end_lag();
    }

    /// Notes a `ROLE` reply's count at `now`, on a connection `ROLE` was read on before: more
    /// replicas count at once, fewer only once `ROLE` has listed fewer for [`LOST_AFTER`].
    fn listed(&self, replicas: u32, now: Instant) {
        let mut fewer_since = self.fewer_since.lock().unwrap_or_else(|e| e.into_inner());
        let seen = self.seen.load(Ordering::Relaxed);
        if seen == UNKNOWN || replicas >= seen {
            *fewer_since = None;
            self.seen.store(replicas, Ordering::Relaxed);
            return;
        }
        let since = *fewer_since.get_or_insert(now);
        if now.duration_since(since) >= LOST_AFTER {
            *fewer_since = None;
            self.seen.store(replicas, Ordering::Relaxed);
        }
    }

    /// Notes a `ROLE` reply's count on a new connection (taken as it is).
    fn counted(&self, replicas: u32) {
        *self.fewer_since.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.seen.store(replicas, Ordering::Relaxed);
    }
}

/// Why the watch reads `ROLE`.
enum Reason {
    /// A (re)connection, to this server.
    Connected(String),
    /// The poll's tick (or connections missed).
    Poll,
    /// A `WAIT` came back short.
    Short,
}

/// Keeps `replicas` up to date for `client`'s connection while `retired` is not set: `ROLE` at
/// each connection (the first included), after each short `WAIT`, and every [`ROLE_POLL`]. Call
/// before the client connects, or its first connection goes unseen. The watch ends once
/// `replicas` is dropped (the store with it).
pub fn watch(client: &Client, replicas: &Arc<Replicas>, configured: u32, retired: Arc<AtomicBool>) {
    let mut connections = client.reconnect_rx();
    let client = client.clone();
    let recheck = replicas.recheck.clone();
    let replicas = Arc::downgrade(replicas);
    tokio::spawn(async move {
        let mut poll = tokio::time::interval(ROLE_POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let reason = tokio::select! {
                connection = connections.recv() => match connection {
                    Ok(server) => Reason::Connected(server.to_string()),
                    // Connections missed: the last one's server is the one already noted.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => Reason::Poll,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                },
                _ = recheck.notified() => Reason::Short,
                _ = poll.tick() => Reason::Poll,
            };
            let Some(replicas) = replicas
                .upgrade()
                .filter(|_| !retired.load(Ordering::Relaxed))
            else {
                return;
            };
            let connected = match reason {
                Reason::Connected(server) => {
                    replicas.connected(server);
                    true
                }
                _ if !client.is_connected() => continue,
                Reason::Poll | Reason::Short => false,
            };
            let Some(offsets) = role(&client).await else {
                continue;
            };
            let count = offsets.replicas.len() as u32;
            match connected {
                true => replicas.counted(count),
                false => replicas.listed(count, Instant::now()),
            }
            replicas.offsets_read(&offsets, configured);
        }
    });
}

/// A master's replication offset and the offset each replica it lists (those online) last
/// acknowledged.
#[derive(Debug, PartialEq, Eq)]
struct Offsets {
    master: u64,
    replicas: Vec<u64>,
}

/// What `ROLE` says of the master's replicas (`None`: no answer in time, or the server is no
/// master).
async fn role(client: &Client) -> Option<Offsets> {
    let command = CustomCommand::new_static("ROLE", ClusterHash::Random, false);
    let reply = tokio::time::timeout(ROLE_TIMEOUT, client.custom::<Value, Value>(command, vec![]));
    replicas_in(reply.await.ok()?.ok()?)
}

/// A master's `ROLE` reply, `["master", offset, [[ip, port, offset], ...]]`, as [`Offsets`]
/// (an offset that cannot be read counts as 0).
fn replicas_in(reply: Value) -> Option<Offsets> {
    let mut parts = reply.into_array().into_iter();
    if parts.next()?.as_str()?.as_ref() != "master" {
        return None;
    }
    let offset = |v: Value| v.as_u64().unwrap_or(0);
    let master = offset(parts.next()?);
    let listed = parts.next()?.into_array();
    let replicas = listed
        .into_iter()
        .map(|r| r.into_array().into_iter().nth(2).map_or(0, offset))
        .collect();
    Some(Offsets { master, replicas })
}

#[cfg(test)]
#[path = "replicas_tests.rs"]
mod tests;

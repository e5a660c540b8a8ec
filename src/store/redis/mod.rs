//! The Redis store. Decisions go through per-node [`lane::Lane`]s, so the decisions in flight
//! at one moment for one node become one `EVALSHA` of the decision script; each waits at most
//! `store.timeout` (one [`Deadline`] per call), after which its route's `on_error` applies.
//! The script is loaded with `SCRIPT LOAD` at start; a `NOSCRIPT` reply (restart, failover,
//! `SCRIPT FLUSH`) loads it again and retries within the same deadline, so no client ever sees
//! it. Commands fail fast while disconnected instead of queueing, so a dead Redis costs a
//! request at most `store.timeout`.
//!
//! `lane.rs` queues, `call.rs` packs and sends one call, `answer.rs` decodes its reply and
//! sorts its errors, `split.rs` decides a cluster request
//! whose keys live in several slots one part per slot, `admin.rs` resets, pings, blocks and the
//! reset channel, `script.rs` the script, `url.rs` the URL forms, `deadline.rs` the deadline.

mod admin;
mod answer;
mod call;
mod deadline;
mod dry;
mod encode;
mod keeper;
mod lane;
mod script;
mod split;
mod url;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use fred::clients::Client;
use fred::interfaces::{ClientLike, ClusterInterface};
use fred::types::cluster::ClusterRouting;
use fred::types::config::{Config as FredConfig, ConnectionConfig, ReconnectPolicy, Server};
use fred::types::{Builder, Key};
use tokio::sync::oneshot;

pub use answer::RedisAnswer;
use answer::{is_noscript, map_error, Single};
use call::{Caller, Target};
pub use deadline::Deadline;
use lane::{Lane, Pending, PendingSettlement, MAX_PER_CALL};
pub use script::decision_script;
pub use url::fred_url;

use super::{Answer, Decision, DecisionRequest, Settlement, StoreError};
use crate::config::StoreConfig;
use crate::workers::PerWorker;

/// Counts a failed store call (the gateway counts it in `slidegate_store_errors_total`).
pub type OnError = Arc<dyn Fn(&StoreError) + Send + Sync>;

/// Redis-backed limiter; clones share the connection and the lanes.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    builder: Builder,
    timeout: Duration,
    /// One connection per worker (see `crate::workers`): a request's decision goes out on its
    /// own worker's connection and lanes, so no hop wakes another thread.
    connections: PerWorker<Connection>,
    started: Instant,
}

/// What one worker uses to reach Redis.
struct Connection {
    client: Client,
    caller: Arc<Caller>,
    /// Standalone and sentinel: the one lane, found without a lock.
    single: OnceLock<Lane>,
    /// Cluster: one lane per primary node.
    lanes: RwLock<HashMap<Option<Server>, Lane>>,
    /// The cluster's slot table, re-read from the client at most once a second.
    routing: ArcSwapOption<ClusterRouting>,
    routing_read_at_ms: AtomicU64,
}

impl RedisStore {
    /// Connects to `config.url` in the background; returns at once even if Redis is down (the
    /// client keeps reconnecting, and decisions fail fast meanwhile). Every failed call is
    /// handed to `on_error`.
    ///
    /// With several workers, pass their runtimes' `handles`: each worker's client is connected
    /// inside its runtime, so its I/O is driven there. An empty list means the current runtime.
    pub async fn connect(
        config: &StoreConfig,
        on_error: OnError,
        handles: &[tokio::runtime::Handle],
    ) -> Result<RedisStore, StoreError> {
        let fred_config = FredConfig {
            fail_fast: false,
            ..FredConfig::from_url(&fred_url(&config.url)).map_err(|e| {
                StoreError::Other(format!(
                    "store.url: {}",
                    crate::config::redact_secrets(&e.to_string())
                ))
            })?
        };
        let mut builder = Builder::from_config(fred_config);
        builder
            .with_connection_config(|c: &mut ConnectionConfig| {
                c.connection_timeout = Duration::from_secs(1);
                c.internal_command_timeout = Duration::from_secs(1);
                // Without it, a call written while another is unacknowledged (a batch's second
                // call, an admin command beside a decision) waits in the kernel for the first
                // reply, which carries Redis's delayed ACK: Nagle's algorithm undoing pipelining.
                c.tcp.nodelay = Some(true);
            })
            .set_policy(ReconnectPolicy::new_exponential(0, 50, 1000, 2));
        let cross_slot = Arc::new(AtomicBool::new(true));
        let mut clients = Vec::with_capacity(crate::workers::count());
        let mut tasks = Vec::with_capacity(crate::workers::count());
        for i in 0..crate::workers::count() {
            let client = builder
                .build()
                .map_err(|e| StoreError::Other(e.to_string()))?;
            // The client spawns its connection tasks on the runtime it is connected from.
            let _entered = handles.get(i).map(|h| h.enter());
            tasks.push(client.connect());
            clients.push(client);
        }
        let connections = PerWorker::new(|i| {
            let client = clients[i].clone();
            let caller = Caller::new(
                client.clone(),
                config.clock,
                config.timeout,
                on_error.clone(),
                cross_slot.clone(),
            );
            Connection {
                client,
                caller: Arc::new(caller),
                single: OnceLock::new(),
                lanes: RwLock::new(HashMap::new()),
                routing: ArcSwapOption::empty(),
                routing_read_at_ms: AtomicU64::new(0),
            }
        });
        let redis = RedisStore {
            inner: Arc::new(Inner {
                builder,
                timeout: config.timeout,
                connections,
                started: Instant::now(),
            }),
        };
        // Each worker's connection task is watched on that worker, for as long as the store
        // lives (the keeper holds it weakly).
        for (i, task) in tasks.into_iter().enumerate() {
            let _entered = handles.get(i).map(|h| h.enter());
            let store = Arc::downgrade(&redis.inner);
            keeper::keep_connected(task, move || {
                let inner = store.upgrade()?;
                Some(inner.connections.all()[i].client.connect())
            });
        }
        Ok(redis)
    }

    /// Waits up to `wait` for every worker's connection and loads the script.
    pub async fn wait_until_ready(&self, wait: Duration) -> Result<(), StoreError> {
        Deadline::after(wait)
            .run(async {
                for c in self.inner.connections.all() {
                    c.client.wait_for_connect().await.map_err(map_error)?;
                }
                self.inner.connections.all()[0].caller.load_scripts().await
            })
            .await
    }

    /// Whether this worker's client is connected to Redis now.
    pub fn is_connected(&self) -> bool {
        self.inner.connections.get().client.is_connected()
    }

    /// This worker's client (for admin operations and tests).
    pub fn client(&self) -> &Client {
        &self.inner.connections.get().client
    }

    fn clustered(&self) -> bool {
        self.inner.connections.get().client.is_clustered()
    }

    /// Queues one request on its node's lane, coalesced with the others in flight there; the
    /// answer is a future that owns what it needs. In a cluster, a request whose keys live in
    /// several slots is decided one part per slot ([`split`]).
    pub fn submit(&self, request: DecisionRequest<'_>, now_us: Option<u64>) -> Answer {
        if request.limits.limits.is_empty() {
            return Answer::Ready(Some(Ok(Decision::unlimited())));
        }
        if self.clustered() && request.limits.used_slots().len() > 1 {
            return Answer::Redis(RedisAnswer::Split(split::decide(
                self.clone(),
                request,
                now_us,
            )));
        }
        let (pending, receiver) =
            self.pending(request, now_us, Deadline::after(self.inner.timeout));
        let lane = self.lane_for(&pending.keys);
        if pending.dry {
            lane.submit_dry(vec![vec![pending]]);
        } else {
            lane.submit(pending);
        }
        Answer::Redis(RedisAnswer::Single(Single {
            limits: request.limits.clone(),
            receiver,
            cost: request.cost,
        }))
    }

    /// Decides many requests in order: they fill a few large calls per node. The batch has one
    /// deadline: `store.timeout` for every call it needs on one node.
    pub async fn decide_many(
        &self,
        requests: &[DecisionRequest<'_>],
        now_us: Option<u64>,
    ) -> Vec<Result<Decision, StoreError>> {
        let calls = requests.len().div_ceil(MAX_PER_CALL).max(1) as u32;
        let deadline = Deadline::after(self.inner.timeout * calls);
        let split = self.clustered();
        let mut by_lane: Vec<(Lane, Vec<Pending>)> = Vec::new();
        let mut answers: Vec<Answer> = Vec::with_capacity(requests.len());
        for request in requests {
            if request.limits.limits.is_empty() || (split && request.limits.used_slots().len() > 1)
            {
                answers.push(self.submit(*request, now_us));
                continue;
            }
            let (pending, receiver) = self.pending(*request, now_us, deadline);
            let lane = self.lane_for(&pending.keys);
            match by_lane.iter_mut().find(|(l, _)| l.same(&lane)) {
                Some((_, group)) => group.push(pending),
                None => by_lane.push((lane, vec![pending])),
            }
            answers.push(Answer::Redis(RedisAnswer::Single(Single {
                limits: request.limits.clone(),
                receiver,
                cost: request.cost,
            })));
        }
        for (lane, group) in by_lane {
            if group.first().is_some_and(|p| p.dry) {
                lane.submit_dry(dry::calls(group));
            } else {
                lane.submit_many(group);
            }
        }
        let mut out = Vec::with_capacity(requests.len());
        for answer in answers {
            out.push(answer.await);
        }
        out
    }

    /// Queues a settlement on the lane of its keys at once, to ride in that lane's next call
    /// (ahead of its decisions, so a decision asked for afterwards sees it); the future tells
    /// when it is applied.
    pub fn settle(
        &self,
        settlement: Settlement,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        let mut waits = Vec::new();
        for part in &settlement.receipt.parts {
            let (limits, bases, index_of) = match part.slot {
                None => (
                    settlement.limits.clone(),
                    settlement.bases.clone(),
                    (0..settlement.limits.limits.len()).collect::<Vec<_>>(),
                ),
                Some(slot) => {
                    let (part_set, indexes) = settlement.limits.part(slot);
                    (part_set, vec![settlement.bases[slot].clone()], indexes)
                }
            };
            let within = |list: &[usize]| -> Vec<usize> {
                list.iter()
                    .filter_map(|i| index_of.iter().position(|j| j == i))
                    .collect()
            };
            let (refund, confirm, reset) = (
                within(&settlement.refund),
                within(&settlement.confirm),
                within(&settlement.reset),
            );
            if refund.is_empty() && confirm.is_empty() && reset.is_empty() {
                continue;
            }
            let keys: Vec<Key> = limits.keys(&bases).into_iter().map(Key::from).collect();
            let (done, wait) = oneshot::channel();
            let lane = self.lane_for(&keys);
            lane.settle(PendingSettlement {
                limits,
                keys,
                member: part.member.clone(),
                at: part.decided_at_us,
                cost: settlement.receipt.cost,
                refund,
                confirm,
                reset,
                deadline: Deadline::after(self.inner.timeout * 4),
                done,
            });
            waits.push(wait);
        }
        async move {
            for wait in waits {
                wait.await.unwrap_or_else(|_| {
                    Err(StoreError::Other("the decision lane stopped".into()))
                })?;
            }
            Ok(())
        }
    }

    fn pending(
        &self,
        request: DecisionRequest<'_>,
        now_us: Option<u64>,
        deadline: Deadline,
    ) -> (Pending, oneshot::Receiver<Result<lane::Answer, StoreError>>) {
        let (reply, answer) = oneshot::channel();
        let keys = request
            .limits
            .keys(request.bases)
            .into_iter()
            .map(Key::from)
            .collect();
        let pending = Pending {
            limits: request.limits.clone(),
            keys,
            cost: request.cost,
            dry: request.dry_run,
            receipt: request.receipt && request.cost > 0 && !request.dry_run,
            fixed_now: now_us,
            deadline,
            reply,
        };
        (pending, answer)
    }

    /// The lane of the node serving `keys` (they share one hash tag, so one slot).
    fn lane_for(&self, keys: &[Key]) -> Lane {
        let connection = self.inner.connections.get();
        if !connection.client.is_clustered() {
            return connection
                .single
                .get_or_init(|| Lane::start(connection.caller.clone(), Target::ByKey))
                .clone();
        }
        let slot = keys
            .first()
            .map_or(0, |k| ClusterRouting::hash_key(k.as_bytes()));
        let (node, target) = match self
            .routing(connection)
            .and_then(|r| r.get_server(slot).cloned())
        {
            Some(server) => (Some(server.clone()), Target::Node(server)),
            None => (None, Target::PerSlot),
        };
        if let Some(lane) = connection
            .lanes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&node)
        {
            return lane.clone();
        }
        let mut lanes = connection.lanes.write().unwrap_or_else(|e| e.into_inner());
        lanes
            .entry(node)
            .or_insert_with(|| Lane::start(connection.caller.clone(), target))
            .clone()
    }

    /// The cluster slot table as the client last learnt it (re-read at most once a second).
    fn routing(&self, connection: &Connection) -> Option<Arc<ClusterRouting>> {
        let now_ms = self.inner.started.elapsed().as_millis() as u64;
        let read_at = connection.routing_read_at_ms.load(Ordering::Relaxed);
        let cached = connection.routing.load_full();
        if cached.is_none() || now_ms >= read_at + 1000 {
            connection
                .routing_read_at_ms
                .store(now_ms, Ordering::Relaxed);
            if let Some(fresh) = connection.client.cached_cluster_state() {
                let fresh = Arc::new(fresh);
                connection.routing.store(Some(fresh.clone()));
                return Some(fresh);
            }
        }
        cached
    }
}

//! The Redis store. Decisions go through per-node [`coalesce::Lane`]s, so the decisions in
//! flight at one moment for one node become one `EVALSHA` of the algorithm's multi-decision
//! script; each waits at most `store.timeout` (one [`Deadline`] per call), after which its
//! route's `on_error` applies. Scripts are loaded with `SCRIPT LOAD` at start; a `NOSCRIPT` reply
//! (restart, failover, `SCRIPT FLUSH`) loads the script again and retries within the same
//! deadline, so no client ever sees it. Commands fail fast while disconnected instead of
//! queueing, so a dead Redis costs a request at most `store.timeout`.
//!
//! `coalesce.rs` has the lanes and the calls, `admin.rs` resets, pings and the reset channel,
//! `script.rs` the scripts, `url.rs` the URL forms, `deadline.rs` the one deadline helper.

mod admin;
mod coalesce;
mod deadline;
mod script;
mod url;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use fred::clients::Client;
use fred::error::{Error as FredError, ErrorKind};
use fred::interfaces::{ClientLike, ClusterInterface};
use fred::types::cluster::ClusterRouting;
use fred::types::config::{Config as FredConfig, ConnectionConfig, ReconnectPolicy, Server};
use fred::types::{Builder, Key};
use tokio::sync::oneshot;

use coalesce::{Caller, Lane, Pending, Target, MAX_PER_CALL};
pub use deadline::Deadline;
use script::ScriptKind;
pub use script::{SLIDING_LOG_LUA, SLIDING_WINDOW_COUNTER_LUA};
pub use url::fred_url;

use super::{Answer, Decision, DecisionRequest, StoreError};
use crate::config::StoreConfig;
use crate::metrics::Metrics;
use crate::workers::PerWorker;

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
    /// Standalone and sentinel: one lane per script, found without a lock.
    single: [OnceLock<Lane>; 3],
    /// Cluster: one lane per (primary node, script).
    lanes: RwLock<HashMap<(Option<Server>, ScriptKind), Lane>>,
    /// The cluster's slot table, re-read from the client at most once a second.
    routing: ArcSwapOption<ClusterRouting>,
    routing_read_at_ms: AtomicU64,
}

impl RedisStore {
    /// Connects to `config.url` in the background; returns at once even if Redis is down (the
    /// client keeps reconnecting, and decisions fail fast meanwhile). Failed calls are counted
    /// in `metrics`' `slidegate_store_errors_total`.
    ///
    /// With several workers, pass their runtimes' `handles`: each worker's client is connected
    /// inside its runtime, so its I/O is driven there. An empty list means the current runtime.
    pub async fn connect(
        config: &StoreConfig,
        metrics: &Metrics,
        handles: &[tokio::runtime::Handle],
    ) -> Result<RedisStore, StoreError> {
        let fred_config = FredConfig {
            fail_fast: false,
            ..FredConfig::from_url(&fred_url(&config.url))
                .map_err(|e| StoreError::Other(format!("store.url: {e}")))?
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
        let errors = metrics.store_errors.clone();
        let on_error = Arc::new(move |e: &StoreError| errors.with_label_values(&[e.kind()]).inc());
        let cross_slot = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let mut clients = Vec::with_capacity(crate::workers::count());
        for i in 0..crate::workers::count() {
            let client = builder
                .build()
                .map_err(|e| StoreError::Other(e.to_string()))?;
            // The client spawns its connection tasks on the runtime it is connected from.
            let _entered = handles.get(i).map(|h| h.enter());
            client.connect();
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
                single: [const { OnceLock::new() }; 3],
                lanes: RwLock::new(HashMap::new()),
                routing: ArcSwapOption::empty(),
                routing_read_at_ms: AtomicU64::new(0),
            }
        });
        Ok(RedisStore {
            inner: Arc::new(Inner {
                builder,
                timeout: config.timeout,
                connections,
                started: Instant::now(),
            }),
        })
    }

    /// Waits up to `wait` for every worker's connection and loads the scripts.
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

    /// This worker's client (for admin operations and tests).
    pub fn client(&self) -> &Client {
        &self.inner.connections.get().client
    }

    /// Queues one request on its node's lane, coalesced with the others in flight there; the
    /// answer is a future that owns what it needs.
    pub fn submit(&self, request: DecisionRequest<'_>, now_us: Option<u64>) -> Answer {
        if request.limits.limits.is_empty() {
            return Answer::Ready(Some(Ok(Decision::unlimited())));
        }
        let (pending, receiver) =
            self.pending(request, now_us, Deadline::after(self.inner.timeout));
        self.lane_for(&pending).submit(pending);
        Answer::Redis(RedisAnswer {
            limits: request.limits.clone(),
            receiver,
        })
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
        let mut by_lane: Vec<(Lane, Vec<Pending>)> = Vec::new();
        let mut answers = Vec::with_capacity(requests.len());
        for request in requests {
            if request.limits.limits.is_empty() {
                answers.push(None);
                continue;
            }
            let (pending, answer) = self.pending(*request, now_us, deadline);
            let lane = self.lane_for(&pending);
            match by_lane.iter_mut().find(|(l, _)| l.same(&lane)) {
                Some((_, group)) => group.push(pending),
                None => by_lane.push((lane, vec![pending])),
            }
            answers.push(Some(answer));
        }
        for (lane, group) in by_lane {
            lane.submit_many(group);
        }
        let mut out = Vec::with_capacity(requests.len());
        for (request, answer) in requests.iter().zip(answers) {
            out.push(match answer {
                Some(answer) => receive(*request, answer).await,
                None => Ok(Decision::unlimited()),
            });
        }
        out
    }

    fn pending(
        &self,
        request: DecisionRequest<'_>,
        now_us: Option<u64>,
        deadline: Deadline,
    ) -> (
        Pending,
        oneshot::Receiver<Result<coalesce::Answer, StoreError>>,
    ) {
        let (reply, answer) = oneshot::channel();
        let keys = request
            .limits
            .keys(request.base)
            .into_iter()
            .map(Key::from)
            .collect();
        let pending = Pending {
            limits: request.limits.clone(),
            keys,
            cost: request.cost,
            fixed_now: now_us,
            deadline,
            reply,
        };
        (pending, answer)
    }

    /// The lane of the node serving the decision's keys (they share one hash tag, so one slot).
    fn lane_for(&self, pending: &Pending) -> Lane {
        let kind = ScriptKind::of(&pending.limits);
        let connection = self.inner.connections.get();
        if !connection.client.is_clustered() {
            return connection.single[kind as usize]
                .get_or_init(|| Lane::start(connection.caller.clone(), Target::ByKey, kind))
                .clone();
        }
        let slot = ClusterRouting::hash_key(pending.keys[0].as_bytes());
        let (node, target) = match self
            .routing(connection)
            .and_then(|r| r.get_server(slot).cloned())
        {
            Some(server) => (Some(server.clone()), Target::Node(server)),
            None => (None, Target::PerSlot),
        };
        let id = (node, kind);
        if let Some(lane) = connection
            .lanes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
        {
            return lane.clone();
        }
        let mut lanes = connection.lanes.write().unwrap_or_else(|e| e.into_inner());
        lanes
            .entry(id)
            .or_insert_with(|| Lane::start(connection.caller.clone(), target, kind))
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

/// A decision queued on a lane, decoded when its call's reply arrives.
pub struct RedisAnswer {
    /// The limits the reply is decoded against.
    limits: Arc<crate::store::LimitSet>,
    /// Where the lane sends the reply.
    receiver: oneshot::Receiver<Result<coalesce::Answer, StoreError>>,
}

impl std::future::Future for RedisAnswer {
    type Output = Result<Decision, StoreError>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = self.get_mut();
        let reply = std::task::ready!(std::pin::Pin::new(&mut this.receiver).poll(cx));
        std::task::Poll::Ready(decode(&this.limits, reply))
    }
}

/// Waits for a decision's answer and decodes it.
async fn receive(
    request: DecisionRequest<'_>,
    answer: oneshot::Receiver<Result<coalesce::Answer, StoreError>>,
) -> Result<Decision, StoreError> {
    decode(request.limits, answer.await)
}

/// A decision from its part of a call's reply (or the call's error, or a lane that stopped).
fn decode(
    limits: &crate::store::LimitSet,
    reply: Result<Result<coalesce::Answer, StoreError>, oneshot::error::RecvError>,
) -> Result<Decision, StoreError> {
    match reply {
        Ok(Ok(a)) => Decision::from_reply(limits, &a.values, a.decided_at_us),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(StoreError::Other("the decision lane stopped".into())),
    }
}

/// Whether Redis answered that it does not know the script.
fn is_noscript(e: &FredError) -> bool {
    e.details().starts_with("NOSCRIPT")
}

/// Sorts a client error into the `kind` label of `slidegate_store_errors_total`.
fn map_error(e: FredError) -> StoreError {
    let details = e.details();
    if details.starts_with("NOSCRIPT")
        || details.starts_with("ERR")
        || details.starts_with("WRONGTYPE")
        || details.starts_with("MOVED")
        || details.starts_with("ASK")
        || details.starts_with("CROSSSLOT")
    {
        return StoreError::Script(e.to_string());
    }
    match e.kind() {
        ErrorKind::Timeout => StoreError::Timeout(Duration::ZERO),
        ErrorKind::IO
        | ErrorKind::Canceled
        | ErrorKind::Backpressure
        | ErrorKind::Sentinel
        | ErrorKind::Tls
        | ErrorKind::Auth => StoreError::Connection(e.to_string()),
        ErrorKind::Routing | ErrorKind::Cluster => StoreError::Script(e.to_string()),
        ErrorKind::Parse
        | ErrorKind::Protocol
        | ErrorKind::InvalidArgument
        | ErrorKind::InvalidCommand => StoreError::Script(e.to_string()),
        _ => StoreError::Other(e.to_string()),
    }
}

//! [`RedisStore`]: the gateway's handle on Redis, one set of connections and decision lanes per
//! worker; its decisions, settlements and batches. Resets, pings, eviction and readiness are
//! methods of it in files of their own.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::config::Config as FredConfig;
use fred::types::{Builder, Key};
use tokio::sync::oneshot;

use super::acks::AckPolicy;
use super::answer::RedisAnswer;
use super::answer::Single;
use super::batch::{Pending, PendingSettlement, MAX_PER_CALL};
use super::call::Caller;
use super::code::Shared;
use super::deadline::Deadline;
use super::lane::Lane;
use super::lanes::Lanes;
use super::node::{builder, ReplicaWatch};
use super::nodes::Nodes;
use super::topology::{MakeBuilder, Topology};
use super::url::fred_url;
use super::{dry, split};

use crate::config::StoreConfig;
use crate::store::{Decision, DecisionRequest, LimitSet, Settlement, StoreError};
use crate::workers::PerWorker;

/// Counts a failed store call that carried no decision (the gateway counts it in
/// `slidegate_store_errors_total`; a decision's failure is counted where it is answered).
pub type OnError = Arc<dyn Fn(&StoreError) + Send + Sync>;

/// Redis-backed limiter; clones share the connection and the lanes.
#[derive(Clone)]
pub struct RedisStore {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    /// The URL's settings, for the reset channel's subscriber.
    pub(super) subscriber: Builder,
    pub(super) timeout: Duration,
    /// `store.replica_acks`.
    pub(super) replica_acks: u32,
    /// One set of connections per worker (see `crate::workers`): a request's decision goes out
    /// on its own worker's connection and lanes, so no hop wakes another thread.
    pub(super) connections: PerWorker<Connection>,
}

/// What one worker uses to reach Redis.
pub(super) struct Connection {
    pub(super) nodes: Arc<Nodes>,
    pub(super) caller: Arc<Caller>,
    pub(super) lanes: Lanes,
}

impl RedisStore {
    /// Connects to `config.url` in the background; returns at once even if Redis is down (the
    /// clients keep reconnecting, and decisions fail fast meanwhile). Every failed call is
    /// handed to `on_error`.
    ///
    /// With several workers, pass their runtimes' `handles`: each worker's clients are
    /// connected inside its runtime, so their I/O is driven there. An empty list means the
    /// current runtime.
    pub async fn connect(
        config: &StoreConfig,
        on_error: OnError,
        handles: &[tokio::runtime::Handle],
    ) -> Result<RedisStore, StoreError> {
        let base = FredConfig {
            fail_fast: false,
            ..FredConfig::from_url(&fred_url(&config.url)).map_err(|e| {
                StoreError::Other(format!(
                    "store.url: {}",
                    crate::config::redact_secrets(&e.to_string())
                ))
            })?
        };
        let make: MakeBuilder = Arc::new(builder);
        let topology = base
            .server
            .is_clustered()
            .then(|| Arc::new(Topology::new(base.clone(), make.clone())));
        let acks = AckPolicy::new(config.replica_acks, config.timeout);
        let watch = acks.map(|a| ReplicaWatch {
            configured: a.replicas(),
            book: Arc::default(),
        });
        let shared = Shared::new(config.scripts);
        let mut workers = Vec::with_capacity(crate::workers::count());
        for i in 0..crate::workers::count() {
            let handle = handles
                .get(i)
                .cloned()
                .unwrap_or_else(tokio::runtime::Handle::current);
            let nodes = match &topology {
                Some(topology) => Nodes::cluster(topology.clone(), handle, watch.clone()),
                None => Nodes::single(&make(base.clone()), handle, watch.clone())?,
            };
            workers.push(Some(Arc::new(nodes)));
        }
        let connections = PerWorker::new(|i| {
            let nodes = workers[i]
                .take()
                .expect("one set of connections per worker");
            let caller = Caller::new(
                nodes.clone(),
                config.clock,
                config.timeout,
                acks,
                on_error.clone(),
                shared.clone(),
            );
            Connection {
                nodes,
                caller: Arc::new(caller),
                lanes: Lanes::default(),
            }
        });
        Ok(RedisStore {
            inner: Arc::new(Inner {
                subscriber: make(base),
                timeout: config.timeout,
                replica_acks: config.replica_acks,
                connections,
            }),
        })
    }

    /// Whether this worker reaches Redis now (in a cluster: some primary).
    pub fn is_connected(&self) -> bool {
        self.connection()
            .nodes
            .every_node()
            .iter()
            .any(|n| n.client.is_connected())
    }

    /// This worker's client of the one server (standalone or sentinel), or of a cluster's
    /// first primary (for tests).
    pub fn client(&self) -> Client {
        let first = self.connection().nodes.every_node().into_iter().next();
        first.expect("a store has a node once connected").client
    }

    /// `store.replica_acks`, and each master's replicas as last seen (`ROLE`, `WAIT`; every
    /// worker's connection to a node shares them; kept only when `store.replica_acks` is above
    /// 0).
    pub fn replicas(&self) -> (u32, Vec<(String, u32)>) {
        let mut seen: BTreeMap<String, u32> = BTreeMap::new();
        for connection in self.inner.connections.all() {
            let nodes = connection.nodes.every_node();
            for (server, n) in nodes.iter().filter_map(|node| node.replicas.seen()) {
                let fewest = seen.entry(server).or_insert(n);
                *fewest = n.min(*fewest);
            }
        }
        (self.inner.replica_acks, seen.into_iter().collect())
    }

    /// The connections of the worker this runs on.
    pub(super) fn connection(&self) -> &Connection {
        self.inner.connections.get()
    }

    fn clustered(&self) -> bool {
        self.connection().nodes.is_cluster()
    }

    /// Whether the store is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.clustered()
    }

    /// Whether a request on `limits` is decided one part per slot ([`split`]): in a cluster,
    /// when its keys live in several slots.
    pub fn decides_in_parts(&self, limits: &LimitSet) -> bool {
        self.clustered() && limits.used_slots().len() > 1
    }

    /// Queues one request on its node's lane, coalesced with the others in flight there; the
    /// answer is a future that owns what it needs. In a cluster, a request whose keys live in
    /// several slots is decided one part per slot ([`split`]).
    pub fn submit(&self, request: DecisionRequest<'_>, now_us: Option<u64>) -> RedisAnswer {
        if request.limits.limits.is_empty() {
            return RedisAnswer::Ready(Some(Ok(Decision::unlimited())));
        }
        if self.decides_in_parts(request.limits) {
            return RedisAnswer::Split(split::decide(self.clone(), request, now_us));
        }
        let (pending, receiver) = Pending::of(request, now_us, Deadline::after(self.inner.timeout));
        let lane = self.lane_for(&pending.keys);
        if pending.dry {
            lane.submit_dry(vec![vec![pending]]);
        } else {
            lane.submit(pending);
        }
        RedisAnswer::Single(Single {
            limits: request.limits.clone(),
            receiver,
            cost: request.cost,
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
        let split = self.clustered();
        let mut by_lane: Vec<(Lane, Vec<Pending>)> = Vec::new();
        let mut answers: Vec<RedisAnswer> = Vec::with_capacity(requests.len());
        for request in requests {
            if request.limits.limits.is_empty() || (split && request.limits.used_slots().len() > 1)
            {
                answers.push(self.submit(*request, now_us));
                continue;
            }
            let (pending, receiver) = Pending::of(*request, now_us, deadline);
            let lane = self.lane_for(&pending.keys);
            match by_lane.iter_mut().find(|(l, _)| l.same(&lane)) {
                Some((_, group)) => group.push(pending),
                None => by_lane.push((lane, vec![pending])),
            }
            answers.push(RedisAnswer::Single(Single {
                limits: request.limits.clone(),
                receiver,
                cost: request.cost,
            }));
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
        self.queue_settlement(settlement, || {
            let (done, wait) = oneshot::channel();
            waits.push(wait);
            Some(done)
        });
        async move {
            for wait in waits {
                wait.await.unwrap_or_else(|_| {
                    Err(StoreError::Other("the decision lane stopped".into()))
                })?;
            }
            Ok(())
        }
    }

    /// Queues a settlement as [`RedisStore::settle`] does, with no one to wait for it: the lane
    /// logs a failure itself (no task and no channel per settlement).
    pub fn settle_detached(&self, settlement: Settlement) {
        self.queue_settlement(settlement, || None);
    }

    /// Queues each part of `settlement` on its lane; `done` gives each part's teller.
    fn queue_settlement(
        &self,
        settlement: Settlement,
        mut done: impl FnMut() -> Option<oneshot::Sender<Result<(), StoreError>>>,
    ) {
        let Settlement {
            limits: all,
            bases,
            receipt,
            mut refund,
            mut confirm,
            mut unanswered,
            mut reset,
            mut settle_to,
            at_us,
            tags: slot_tags,
        } = settlement;
        for part in receipt.parts {
            let (limits, part_bases, index_of) = match part.slot {
                // one call decided every slot: the only part, settled by the lists as they are
                None => (all.clone(), &bases[..], None),
                Some(slot) => {
                    let (part_set, indexes) = all.part(slot);
                    (part_set, std::slice::from_ref(&bases[slot]), Some(indexes))
                }
            };
            let (refund, confirm, unanswered, reset, settle_to) = match &index_of {
                None => (
                    std::mem::take(&mut refund),
                    std::mem::take(&mut confirm),
                    std::mem::take(&mut unanswered),
                    std::mem::take(&mut reset),
                    std::mem::take(&mut settle_to),
                ),
                Some(index_of) => {
                    let at = |i: usize| index_of.iter().position(|&j| j == i);
                    let within = |list: &[usize]| list.iter().filter_map(|&i| at(i)).collect();
                    let settle_to = settle_to.iter();
                    let settle_to = settle_to.filter_map(|&(i, amount)| Some((at(i)?, amount)));
                    (
                        within(&refund),
                        within(&confirm),
                        within(&unanswered),
                        within(&reset),
                        settle_to.collect(),
                    )
                }
            };
            let lists = [&refund, &confirm, &unanswered, &reset];
            if lists.iter().all(|l| l.is_empty()) && settle_to.is_empty() {
                continue;
            }
            let keys = limits.keys(part_bases).into_iter().map(Key::from);
            let keys: Vec<Key> = keys.collect();
            // per limit of the part, the tag of its slot
            let tags = (0..limits.limits.len())
                .map(|i| {
                    let i = index_of.as_ref().map_or(i, |index_of| index_of[i]);
                    slot_tags.get(all.slot_of(i)).cloned().unwrap_or_default()
                })
                .collect();
            let lane = self.lane_for(&keys);
            lane.settle(PendingSettlement {
                limits,
                keys,
                member: part.member,
                at: part.decided_at_us,
                cost: receipt.cost,
                refund,
                release: Vec::new(),
                confirm,
                unanswered,
                reset,
                settle_to,
                at_us,
                tags,
                deadline: Deadline::after(self.inner.timeout * 4),
                done: done(),
            });
        }
    }

    /// The lane of the node serving `keys`.
    fn lane_for(&self, keys: &[Key]) -> Lane {
        let connection = self.connection();
        connection
            .lanes
            .for_keys(&connection.nodes, &connection.caller, keys)
    }
}

impl split::SlotStore for RedisStore {
    fn submit_part(&self, request: DecisionRequest<'_>, now_us: Option<u64>) -> RedisAnswer {
        self.submit(request, now_us)
    }

    fn settle_part(&self, settlement: Settlement) {
        self.settle_detached(settlement)
    }
}

//! Decision stores: a [`Store`] decides every limit of a request in one atomic step. Redis runs
//! the decision script (`lua/`), coalescing the decisions in flight for one node into one call;
//! the embedded [`MemoryStore`] runs the same steps in process. Both answer in the script's
//! reply layout, decoded in one place ([`Decision::from_reply`]), so the two cannot drift apart
//! in how a reply is read.
//!
//! A store knows nothing of routes, modes or HTTP: it is handed a [`LimitSet`] (the effective
//! limits of one request), the bases of its key slots ([`layout::base`]) and a cost, and answers
//! a [`Decision`]; a [`Settlement`] later takes a charge back or clears a count.

mod decision;
mod eviction;
pub mod layout;
mod memory;
mod plan;
mod redis;
pub mod refused;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

pub use decision::{Decision, LimitUsage, Outcome, Receipt, ReceiptPart, StoreError};
pub use eviction::{eviction_warnings, probe_eviction, EvictionTally};
pub use memory::{Marker, MemoryStore};
pub use plan::{BlockSpec, Limit, LimitSet, Refusals, StateSpec};
pub use redis::{
    decision_library, decision_script, fred_url, Deadline, Library, NodeEviction, OnError,
    RedisStore,
};

/// One decision a store is asked for.
#[derive(Debug, Clone, Copy)]
pub struct DecisionRequest<'a> {
    /// The request's effective limits.
    pub limits: &'a Arc<LimitSet>,
    /// The base of each key slot (`layout::base`), in slot order.
    pub bases: &'a [String],
    /// Units this request spends; 0 only reads usage.
    pub cost: u64,
    /// Decide as the request would be, but write nothing (no charge, no block); within one
    /// `decide_many`, a dry run's later requests see the earlier ones' charges and blocks.
    pub dry_run: bool,
    /// Whether the caller may take the charge back (a [`Receipt`] comes with it).
    pub receipt: bool,
}

impl<'a> DecisionRequest<'a> {
    /// A request that charges `cost` units (no receipt).
    pub fn charge(limits: &'a Arc<LimitSet>, bases: &'a [String], cost: u64) -> Self {
        DecisionRequest {
            limits,
            bases,
            cost,
            dry_run: false,
            receipt: false,
        }
    }
}

/// Settles what a decision charged, for some of its limits: `refund` gives the charge back (a
/// reservation whose outcome is not counted), `confirm` marks it answered and counted (no longer
/// in flight), `reset` gives it back and forgets the limit's answered charges and the block
/// level of its key, keeping the reservations still in flight.
#[derive(Debug, Clone)]
pub struct Settlement {
    /// The limits the decision was made with.
    pub limits: Arc<LimitSet>,
    /// Its key slots' bases.
    pub bases: Vec<String>,
    /// What it charged.
    pub receipt: Receipt,
    /// Limits (indexes into `limits`) whose charge goes back.
    pub refund: Vec<usize>,
    /// Limits whose charge was answered and stays counted.
    pub confirm: Vec<usize>,
    /// Limits whose answered count is cleared (the charge itself going back).
    pub reset: Vec<usize>,
    /// Limits whose charge becomes the units given (at most the limit).
    pub settle_to: Vec<(usize, u64)>,
    /// The instant to settle at (µs), when not the store's own clock: the memory store otherwise
    /// settles at the decision's instant, on the clock the decision was made on.
    pub at_us: Option<u64>,
    /// Per key slot, the tag of the value the attempt sent (`~<hex>`) where the slot's key
    /// merges values, else `""`: a confirmation keeps it, a reset forgives only its own.
    pub tags: Vec<String>,
}

impl Settlement {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.refund.is_empty()
            && self.confirm.is_empty()
            && self.reset.is_empty()
            && self.settle_to.is_empty()
    }
}

/// One decision on its way: [`Store::submit`]'s answer.
pub enum Answer {
    /// Decided in process.
    Ready(Option<Result<Decision, StoreError>>),
    /// Waiting for Redis.
    Redis(redis::RedisAnswer),
}

impl Future for Answer {
    type Output = Result<Decision, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Answer::Ready(result) => Poll::Ready(
                result
                    .take()
                    .expect("an answer is not polled after it is ready"),
            ),
            Answer::Redis(answer) => Pin::new(answer).poll(cx),
        }
    }
}

/// The gateway's clock in microseconds since the epoch.
pub fn local_now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Every key a request's bases can have state in: each state of `limits`, each algorithm's
/// state (a reload may have changed one), each block marker; sorted, once each.
fn every_key(limits: &LimitSet, bases: &[String]) -> Vec<String> {
    let mut keys = limits.keys(bases);
    for base in bases {
        keys.push(layout::block_key(base));
        for algorithm in crate::algorithm::AlgorithmId::all() {
            keys.push(layout::state_key(base, algorithm.get().key_suffix()));
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

/// The store that decides: Redis (shared by every instance) or the embedded memory store.
#[derive(Clone)]
pub enum Store {
    /// Redis, standalone, cluster or sentinel.
    Redis(RedisStore),
    /// In-process, single instance.
    Memory(MemoryStore),
}

impl Store {
    /// The store `[store]` configures: the memory store, or Redis, connected and given up to
    /// 2 s to answer (until it does, routes follow their `on_error`), one connection per worker
    /// (`handles`: the workers' runtimes; empty for the current runtime only). `on_error` is told
    /// of every store call that fails.
    pub async fn from_config(
        config: &crate::config::StoreConfig,
        on_error: redis::OnError,
        handles: &[tokio::runtime::Handle],
    ) -> Result<Store, StoreError> {
        match config.backend {
            crate::config::Backend::Memory => Ok(Store::Memory(MemoryStore::new(config.max_keys))),
            crate::config::Backend::Redis => {
                let redis = RedisStore::connect(config, on_error, handles).await?;
                match redis
                    .wait_until_ready(std::time::Duration::from_secs(2))
                    .await
                {
                    Ok(()) => {}
                    // the server answered, and cannot do what the config asks
                    Err(e @ StoreError::Unsupported(_)) => return Err(e),
                    Err(e) => {
                        tracing::warn!(
                            url = %crate::config::redact_url(&config.url),
                            error = %e,
                            "Redis is not reachable yet; routes follow their on_error until it is"
                        );
                    }
                }
                Ok(Store::Redis(redis))
            }
        }
    }

    /// The `backend` label of the decision-duration metric.
    pub fn backend(&self) -> &'static str {
        match self {
            Store::Redis(_) => "redis",
            Store::Memory(_) => "memory",
        }
    }

    /// `store.replica_acks` and each Redis master's replicas as last seen (kept only when
    /// that is above 0; the memory store has none).
    pub fn replicas(&self) -> (u32, Vec<(String, u32)>) {
        match self {
            Store::Redis(redis) => redis.replicas(),
            Store::Memory(_) => (0, Vec::new()),
        }
    }

    /// Decides one request. Redis coalesces it with the decisions in flight at the same moment.
    pub async fn decide(&self, request: DecisionRequest<'_>) -> Result<Decision, StoreError> {
        self.submit(request).await
    }

    /// Asks for one decision and returns its answer as a future that owns everything it needs:
    /// dropping it does not unmake the decision (Redis may already have charged it), so a
    /// caller that may be cancelled can hand it on to be finished.
    pub fn submit(&self, request: DecisionRequest<'_>) -> Answer {
        match self {
            Store::Redis(s) => s.submit(request, None),
            Store::Memory(s) => Answer::Ready(Some(s.decide(request, None))),
        }
    }

    /// Decides many requests, in order, each at one instant of the store's clock (or at
    /// `now_us`, microseconds since the epoch, when given): Redis sends them in a few large
    /// script calls per node.
    pub async fn decide_many(
        &self,
        requests: &[DecisionRequest<'_>],
        now_us: Option<u64>,
    ) -> Vec<Result<Decision, StoreError>> {
        match self {
            Store::Redis(s) => s.decide_many(requests, now_us).await,
            Store::Memory(s) => s.decide_many(requests, now_us),
        }
    }

    /// Applies a settlement, or queues it, before returning: a decision asked for afterwards
    /// sees it. Redis carries it in the next call of the lane of its keys (with whatever
    /// decisions go out then, after it), so a refund rarely costs a call of its own; the future
    /// tells when it is applied.
    pub fn settle(
        &self,
        settlement: Settlement,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'static {
        match self {
            Store::Redis(s) => futures_util::future::Either::Left(s.settle(settlement)),
            Store::Memory(s) => {
                s.settle(&settlement);
                futures_util::future::Either::Right(std::future::ready(Ok(())))
            }
        }
    }

    /// Forgets every count of a request's keys (under every algorithm: a reload may have
    /// changed one) and lifts their blocks, levels included; answers how many keys held
    /// something (0: there was nothing to reset).
    pub async fn reset(&self, limits: &LimitSet, bases: &[String]) -> Result<usize, StoreError> {
        let keys = every_key(limits, bases);
        match self {
            Store::Redis(s) => s.delete(&keys).await,
            Store::Memory(s) => Ok(s.forget(&keys)),
        }
    }

    /// How many of the keys a reset of these bases would forget exist now: whether the store
    /// holds anything for them.
    pub async fn held(&self, limits: &LimitSet, bases: &[String]) -> Result<usize, StoreError> {
        let keys = every_key(limits, bases);
        match self {
            Store::Redis(s) => s.exists(&keys).await,
            Store::Memory(s) => Ok(s.held(&keys)),
        }
    }

    /// Whether a decision records its refusals in its route's index itself (the script, or the
    /// memory store's twin); in a Redis Cluster the gateway writes them after the call
    /// ([`Store::note_refused`]), since an index lives on its own node.
    pub fn records_refusals(&self) -> bool {
        match self {
            Store::Redis(s) => !s.is_cluster(),
            Store::Memory(_) => true,
        }
    }

    /// Records refusals in the refusal index `index` (see [`refused`]).
    pub async fn note_refused(
        &self,
        index: &str,
        entries: &[refused::Refused],
    ) -> Result<(), StoreError> {
        match self {
            Store::Redis(s) => s.note_refused(index, entries).await,
            Store::Memory(s) => {
                s.note_refused(index, entries);
                Ok(())
            }
        }
    }

    /// The refusals of `index` that have not ended, latest-ending first, at most `n` (each
    /// member and its end), and the store's clock now (µs), which they are measured on.
    pub async fn refused_now(
        &self,
        index: &str,
        n: usize,
    ) -> Result<(u64, Vec<(String, u64)>), StoreError> {
        match self {
            Store::Redis(s) => s.refused_now(index, n).await,
            Store::Memory(s) => Ok((local_now_us(), s.refused_now(index, n))),
        }
    }

    /// Removes `members` from the refusal index `index` (keys an operator lifted).
    pub async fn forget_refused(&self, index: &str, members: &[String]) -> Result<(), StoreError> {
        match self {
            Store::Redis(s) => s.forget_refused(index, members).await,
            Store::Memory(s) => {
                s.forget_refused(index, members);
                Ok(())
            }
        }
    }

    /// The block markers at `keys`.
    pub async fn markers(&self, keys: &[String]) -> Result<Vec<Option<Marker>>, StoreError> {
        match self {
            Store::Redis(s) => s.markers(keys).await,
            Store::Memory(s) => Ok(keys.iter().map(|k| s.marker(k)).collect()),
        }
    }

    /// The instant a settlement made now should be applied at, when the gateway's clock is the
    /// store's (the memory store); `None` for Redis, which settles on its own clock.
    pub fn settlement_instant(&self) -> Option<u64> {
        match self {
            Store::Redis(_) => None,
            Store::Memory(_) => Some(local_now_us()),
        }
    }

    /// Whether the store answers (drives `/readyz`).
    pub async fn ping(&self) -> Result<(), StoreError> {
        match self {
            Store::Redis(s) => s.ping().await,
            Store::Memory(_) => Ok(()),
        }
    }
}

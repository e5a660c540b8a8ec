//! [`Store`]: the backend that decides, Redis (shared by every instance) or the embedded memory
//! store, behind one interface; and [`Answer`], a decision on its way from either.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::decision::{Decision, StoreError};
use super::layout;
use super::memory::{Marker, MemoryStore};
use super::plan::LimitSet;
use super::redis::{self, RedisStore};
use super::refused;
use super::request::{local_now_us, DecisionRequest, Settlement};

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

/// The keys of one limit's state (`limit`, an index into `limits`) for `bases`, and, with
/// `lift_block`, the block marker of its key.
fn limit_keys(limits: &LimitSet, limit: usize, bases: &[String], lift_block: bool) -> Vec<String> {
    let state = &limits.states[limits.limits[limit].state];
    let mut keys = vec![layout::state_key(&bases[state.slot], &state.suffix)];
    if lift_block {
        keys.push(layout::block_key(&bases[state.slot]));
    }
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

    /// Whether a request on `limits` is decided in parts, one per Redis Cluster node its keys
    /// live on (each part charging before it knows the others' answers).
    pub fn decides_in_parts(&self, limits: &LimitSet) -> bool {
        match self {
            Store::Redis(redis) => redis.decides_in_parts(limits),
            Store::Memory(_) => false,
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
            Store::Redis(s) => Answer::Redis(s.submit(request, None)),
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

    /// Dry runs for the admin listener (who is refused now): on Redis, asked again while some
    /// time out, within an admin operation's time (four times `store.timeout`, at least
    /// 200 ms), not a decision's.
    pub async fn dry_runs_for_admin(
        &self,
        requests: &[DecisionRequest<'_>],
    ) -> Vec<Result<Decision, StoreError>> {
        match self {
            Store::Redis(s) => s.dry_runs_for_admin(requests).await,
            Store::Memory(s) => s.decide_many(requests, None),
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

    /// Applies a settlement, or queues it, as [`Store::settle`] does, with no one to wait for it:
    /// a failure is logged where it is applied.
    pub fn settle_detached(&self, settlement: Settlement) {
        match self {
            Store::Redis(s) => s.settle_detached(settlement),
            Store::Memory(s) => s.settle(&settlement),
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

    /// Forgets the state of limit `limit` of `limits` for `bases` (shared by the limits that
    /// keep the same state) and, with `lift_block`, their blocks, levels included; answers how
    /// many keys held something.
    pub async fn reset_limit(
        &self,
        limits: &LimitSet,
        limit: usize,
        bases: &[String],
        lift_block: bool,
    ) -> Result<usize, StoreError> {
        let keys = limit_keys(limits, limit, bases, lift_block);
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
    /// member, its end and its instant), and the store's clock now (µs), which they are
    /// measured on.
    pub async fn refused_now(
        &self,
        index: &str,
        n: usize,
    ) -> Result<(u64, Vec<refused::Recorded>), StoreError> {
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

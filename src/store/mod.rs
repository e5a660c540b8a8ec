//! Decision stores: a [`Store`] decides every limit of a key in one atomic step. Redis runs the
//! algorithm's Lua script (`lua/`), coalescing the decisions in flight for one node into one
//! call; the embedded [`MemoryStore`] runs the same algorithm in process. Both answer in the
//! scripts' reply layout, decoded in one place ([`Decision::from_reply`]), so the two cannot
//! drift apart in how a reply is read.
//!
//! A store knows nothing of routes, modes or HTTP: it is handed a [`LimitSet`] (the effective
//! limits of one key), the key's storage base and a cost, and answers a [`Decision`].

mod decision;
mod memory;
mod redis;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

pub use decision::{Decision, LimitUsage, Outcome, StoreError};
pub use memory::MemoryStore;
pub use redis::{fred_url, Deadline, RedisStore, SLIDING_LOG_LUA, SLIDING_WINDOW_COUNTER_LUA};

use crate::config::{Algorithm, ExceedMode, RouteConfig};

/// One limit as a store applies it: the value in force for this key (a segment or plan may
/// change it), the window and the algorithm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// The limit's name (part of its Redis key).
    pub name: String,
    /// Units allowed per window for this key.
    pub limit: u64,
    /// The window in microseconds.
    pub window_us: u64,
    /// How the limit counts.
    pub algorithm: Algorithm,
}

/// Everything a store needs to know about the limits of one key: they are decided together,
/// all charged or none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitSet {
    /// `block_for` in milliseconds when the route blocks, else 0.
    pub block_ms: u64,
    /// The limits in the route's order.
    pub limits: Vec<Limit>,
}

impl LimitSet {
    /// The limits of `route` with the values `value(i)` for limit `i` (its own `limit`, or a
    /// segment's or plan's).
    pub fn of_route_with(route: &RouteConfig, value: impl Fn(usize) -> u64) -> LimitSet {
        LimitSet {
            block_ms: match route.on_exceed {
                ExceedMode::Block { block_for } => block_for.as_millis().max(1) as u64,
                _ => 0,
            },
            limits: route
                .limits
                .iter()
                .enumerate()
                .map(|(i, l)| Limit {
                    name: l.name.clone(),
                    limit: value(i),
                    window_us: l.window.as_micros().max(1) as u64,
                    algorithm: l.algorithm,
                })
                .collect(),
        }
    }

    /// The limits of `route` with their own values.
    pub fn of_route(route: &RouteConfig) -> LimitSet {
        Self::of_route_with(route, |i| route.limits[i].limit)
    }

    /// The one algorithm every limit uses, or `None` when they use both (or there are none).
    pub fn algorithm(&self) -> Option<Algorithm> {
        let first = self.limits.first()?.algorithm;
        self.limits
            .iter()
            .all(|l| l.algorithm == first)
            .then_some(first)
    }

    /// Every key one decision touches (layout in `lua/README.md`): one hash for all the limits
    /// when every limit is a `sliding_window_counter`; otherwise one key per limit, a sorted set
    /// for each `sliding_log` limit and the counter hash for each counter limit; then the block
    /// marker when the route blocks.
    pub fn keys(&self, base: &str) -> Vec<String> {
        let mut keys: Vec<String> = match self.algorithm() {
            Some(Algorithm::SlidingWindowCounter) => vec![crate::key::counter_key(base)],
            _ => self
                .limits
                .iter()
                .map(|l| match l.algorithm {
                    Algorithm::SlidingLog => crate::key::sorted_set_key(base, &l.name),
                    Algorithm::SlidingWindowCounter => crate::key::counter_key(base),
                })
                .collect(),
        };
        if self.block_ms > 0 {
            keys.push(crate::key::block_key(base));
        }
        keys
    }
}

/// One decision a store is asked for.
#[derive(Debug, Clone, Copy)]
pub struct DecisionRequest<'a> {
    /// The key's effective limits.
    pub limits: &'a Arc<LimitSet>,
    /// `<prefix>:{<route>|<key>}`, from [`crate::key::decision_base`].
    pub base: &'a str,
    /// Units this request spends; 0 only reads usage.
    pub cost: u64,
}

/// One decision on its way: [`Store::submit`]'s answer.
pub enum Answer {
    /// Decided in process.
    Ready(Option<Result<Decision, StoreError>>),
    /// Waiting for its Redis call.
    Redis(redis::RedisAnswer),
}

impl std::future::Future for Answer {
    type Output = Result<Decision, StoreError>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        match self.get_mut() {
            Answer::Ready(result) => std::task::Poll::Ready(
                result
                    .take()
                    .expect("an answer is not polled after it is ready"),
            ),
            Answer::Redis(answer) => std::pin::Pin::new(answer).poll(cx),
        }
    }
}

/// The gateway's clock in microseconds since the epoch.
pub fn local_now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
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
    /// The `backend` label of the decision-duration metric.
    pub fn backend(&self) -> &'static str {
        match self {
            Store::Redis(_) => "redis",
            Store::Memory(_) => "memory",
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
            Store::Memory(s) => Answer::Ready(Some(Ok(s.decide(request, None)))),
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
            Store::Memory(s) => s
                .decide_many(requests, now_us)
                .into_iter()
                .map(Ok)
                .collect(),
        }
    }

    /// Forgets every count of a key (under either algorithm) and lifts its block.
    pub async fn reset(&self, limits: &LimitSet, base: &str) -> Result<(), StoreError> {
        match self {
            Store::Redis(s) => s.reset(limits, base).await,
            Store::Memory(s) => {
                s.reset(base);
                Ok(())
            }
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

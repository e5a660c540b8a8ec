//! Rate-limit decisions. A [`Store`] decides every limit of a route for one key in one atomic
//! step: Redis runs the route's Lua script (`lua/`), the embedded [`MemoryStore`] runs the same
//! algorithm in process. Both answer in the script's reply layout, decoded in one place
//! ([`Decision::from_reply`]), so the two cannot drift apart in how a reply is read.
//!
//! The tower middleware ([`RateLimitLayer`]) turns decisions into forwarded requests, delays or
//! 429s; [`DenyCache`] answers repeated rejections locally.

mod deny_cache;
mod layer;
mod memory;
mod redis;
pub mod response;
mod service;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use deny_cache::{CachedDenial, DenyCache};
pub use layer::RateLimitLayer;
pub use memory::MemoryStore;
pub use redis::RedisStore;
pub use service::{PeerAddr, RateLimit};

use crate::config::{Algorithm, ExceedMode, LimitConfig, RouteConfig};
use crate::key::{block_key, limit_key};

/// How one decision came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every limit had room; all were charged.
    Allowed,
    /// Some limit had no room; nothing was charged (a `block` route starts its block here).
    Rejected,
    /// The key is serving a block; nothing was looked at.
    Blocked,
}

/// One limit's state after a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitUsage {
    /// Units counted in the window after the decision.
    pub used: u64,
    /// The configured limit.
    pub limit: u64,
    /// Until the next unit of this quota comes back (the oldest entry leaves the window).
    pub reset: Duration,
    /// Until this limit alone would let the request through; zero when it has room.
    pub retry_after: Duration,
}

impl LimitUsage {
    /// Units left in the window.
    pub fn remaining(&self) -> u64 {
        self.limit.saturating_sub(self.used)
    }

    /// Whether this limit refused the request.
    pub fn exceeded(&self) -> bool {
        !self.retry_after.is_zero()
    }
}

/// The answer for one request: outcome, how long to wait, and every limit's state in config order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Allowed, rejected or blocked.
    pub outcome: Outcome,
    /// Zero when allowed; otherwise the exact wait until the request would fit.
    pub retry_after: Duration,
    /// Per limit, in the route's order.
    pub limits: Vec<LimitUsage>,
}

/// Raw reply in the scripts' layout: `{code, retry_us, used_i, reset_us_i, retry_us_i ...}`.
pub type Reply = Vec<i64>;

impl Decision {
    /// Decodes a script reply for a route with these limits.
    pub fn from_reply(limits: &[LimitConfig], reply: &[i64]) -> Result<Decision, StoreError> {
        if reply.len() != 2 + 3 * limits.len() {
            return Err(StoreError::Script(format!(
                "reply has {} values, expected {}",
                reply.len(),
                2 + 3 * limits.len()
            )));
        }
        let outcome = match reply[0] {
            1 => Outcome::Allowed,
            0 => Outcome::Rejected,
            2 => Outcome::Blocked,
            code => return Err(StoreError::Script(format!("unknown decision code {code}"))),
        };
        let micros = |v: i64| Duration::from_micros(v.max(0) as u64);
        let usage = limits
            .iter()
            .zip(reply[2..].chunks_exact(3))
            .map(|(l, v)| LimitUsage {
                used: v[0].max(0) as u64,
                limit: l.limit,
                reset: micros(v[1]),
                retry_after: micros(v[2]),
            })
            .collect();
        Ok(Decision {
            outcome,
            retry_after: micros(reply[1]),
            limits: usage,
        })
    }

    /// Whether the request may go on.
    pub fn allowed(&self) -> bool {
        self.outcome == Outcome::Allowed
    }

    /// Index of the limit a rejection names: the exceeded one with the longest wait.
    pub fn rejecting_limit(&self) -> Option<usize> {
        self.limits
            .iter()
            .enumerate()
            .filter(|(_, l)| l.exceeded())
            .max_by_key(|(i, l)| (l.retry_after, std::cmp::Reverse(*i)))
            .map(|(i, _)| i)
    }

    /// Index of the limit the headers describe on an allowed response: least remaining, ties to
    /// the soonest reset.
    pub fn tightest_limit(&self) -> Option<usize> {
        self.limits
            .iter()
            .enumerate()
            .min_by_key(|(i, l)| (l.remaining(), l.reset, *i))
            .map(|(i, _)| i)
    }

    /// The same decision seen `elapsed` later (for answers from the deny cache).
    pub fn aged(&self, elapsed: Duration) -> Decision {
        Decision {
            outcome: self.outcome,
            retry_after: self.retry_after.saturating_sub(elapsed),
            limits: self
                .limits
                .iter()
                .map(|l| LimitUsage {
                    reset: l.reset.saturating_sub(elapsed),
                    retry_after: if l.exceeded() {
                        l.retry_after
                            .saturating_sub(elapsed)
                            .max(Duration::from_micros(1))
                    } else {
                        Duration::ZERO
                    },
                    ..l.clone()
                })
                .collect(),
        }
    }
}

/// Why the store could not decide.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// No answer within `store.timeout`.
    #[error("store timed out after {0:?}")]
    Timeout(Duration),
    /// Not connected, or the connection broke.
    #[error("store connection failed: {0}")]
    Connection(String),
    /// The script failed or replied in an unexpected shape.
    #[error("rate-limit script failed: {0}")]
    Script(String),
    /// Anything else.
    #[error("store error: {0}")]
    Other(String),
}

impl StoreError {
    /// The `kind` label of `slidegate_store_errors_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout(_) => "timeout",
            StoreError::Connection(_) => "connection",
            StoreError::Script(_) => "script",
            StoreError::Other(_) => "other",
        }
    }
}

/// What a store needs for one decision: the route, the key's storage base, the cost, the time.
#[derive(Debug, Clone, Copy)]
pub struct DecisionInput<'a> {
    /// The route whose limits are decided.
    pub route: &'a RouteConfig,
    /// `<prefix>:{<route>|<key>}`, from [`crate::key::decision_base`].
    pub base: &'a str,
    /// Units this request spends; 0 only reads usage.
    pub cost: u64,
    /// Microseconds since the epoch, or `None` for the store's own clock.
    pub now_us: Option<u64>,
}

impl DecisionInput<'_> {
    /// The block duration in milliseconds, or 0 when the route does not block.
    pub fn block_ms(&self) -> u64 {
        match self.route.on_exceed {
            ExceedMode::Block { block_for } => block_for.as_millis().max(1) as u64,
            _ => 0,
        }
    }

    /// Every key the decision touches: one per limit, then the block marker.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .route
            .limits
            .iter()
            .map(|l| limit_key(self.base, &l.name, self.route.algorithm))
            .collect();
        keys.push(block_key(self.base));
        keys
    }
}

/// The window of a limit in microseconds, as the scripts take it.
pub fn window_us(limit: &LimitConfig) -> u64 {
    limit.window.as_micros().max(1) as u64
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

    /// Decides one request, atomically across the route's limits.
    pub async fn decide(&self, input: DecisionInput<'_>) -> Result<Decision, StoreError> {
        if input.route.limits.is_empty() {
            return Ok(Decision {
                outcome: Outcome::Allowed,
                retry_after: Duration::ZERO,
                limits: Vec::new(),
            });
        }
        match self {
            Store::Redis(s) => s.decide(input).await,
            Store::Memory(s) => Ok(s.decide(input)),
        }
    }

    /// Decides many keys of one route, in order; Redis pipelines them.
    pub async fn decide_batch(
        &self,
        route: &RouteConfig,
        bases: &[String],
        cost: u64,
        now_us: Option<u64>,
    ) -> Vec<Result<Decision, StoreError>> {
        match self {
            Store::Redis(s) => s.decide_batch(route, bases, cost, now_us).await,
            Store::Memory(s) => bases
                .iter()
                .map(|base| {
                    Ok(s.decide(DecisionInput {
                        route,
                        base,
                        cost,
                        now_us,
                    }))
                })
                .collect(),
        }
    }

    /// Forgets every count of a key and lifts its block.
    pub async fn reset(&self, route: &RouteConfig, base: &str) -> Result<(), StoreError> {
        let input = DecisionInput {
            route,
            base,
            cost: 0,
            now_us: None,
        };
        let mut keys = input.keys();
        // Keys of the other algorithm too, in case a reload changed it.
        for l in &route.limits {
            for alg in [Algorithm::SlidingLog, Algorithm::SlidingWindowCounter] {
                let k = limit_key(base, &l.name, alg);
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
        }
        match self {
            Store::Redis(s) => s.delete(keys).await,
            Store::Memory(s) => {
                s.delete(&keys);
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

//! The limiter: the one place where a decision becomes a verdict. [`Limiter::decide`] (the proxy
//! path) and [`Limiter::decide_many`] (the batch API) share every rule: the deny cache, the
//! store, the route's `on_error` (allow, deny, or the in-process fallback), the exceed modes
//! (reject, delay, block, shadow) and the metrics, each written once in [`Limiter::decide_keys`]
//! and [`Limiter::record`]. On the request path, [`check`] derives the key, asks the limiter and
//! says whether the request is forwarded or answered with a 429.
//!
//! ```text
//! key -> deny cache --hit--> rejected | blocked
//!            | miss
//!            v
//!        store (Redis, coalesced | memory) --error--> on_error: allow | deny | local fallback
//!            v
//!        mode: reject | block -> 429 (cached) ; delay -> wait, decide again ; shadow -> forward
//! ```

mod check;
mod delay;
mod deny_cache;
pub mod headers;
mod policy;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use check::{check, Checked};
pub use deny_cache::{CachedDenial, DenyCache};
pub use policy::{RoutePolicy, Tier};

use crate::config::{ExceedMode, OnError};
use crate::error::STORE_UNAVAILABLE_RETRY_SECS;
use crate::key::decision_base;
use crate::metrics::DecisionLabel;
use crate::store::{
    local_now_us, Answer, Decision, DecisionRequest, MemoryStore, Outcome, Store, StoreError,
};
use crate::tier::TierName;

/// What the limiter concluded for one key.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The request's one entry in `slidegate_requests_total`.
    pub label: DecisionLabel,
    /// The store's (or the fallback's, or the deny cache's) decision; `None` when the store
    /// failed and the route allows or denies without deciding, and for exempt clients.
    pub decision: Option<Decision>,
    /// The segment or plan whose values applied.
    pub tier: Option<TierName>,
}

impl Verdict {
    fn new(label: DecisionLabel, decision: Option<Decision>, tier: Option<&TierName>) -> Verdict {
        Verdict {
            label,
            decision,
            tier: tier.cloned(),
        }
    }

    /// Whether the request goes on to the upstream.
    pub fn forwards(&self) -> bool {
        matches!(
            self.label,
            DecisionLabel::Allowed
                | DecisionLabel::Delayed
                | DecisionLabel::ShadowRejected
                | DecisionLabel::StoreErrorAllowed
                | DecisionLabel::Exempt
        )
    }

    /// How long the client should wait before trying again: zero when forwarded; the exact wait
    /// on a 429; the 503's `Retry-After` when the store failed and the route fails closed.
    pub fn retry_after(&self) -> Duration {
        match (self.forwards(), &self.decision) {
            (true, _) => Duration::ZERO,
            (false, Some(d)) => d.retry_after,
            (false, None) => Duration::from_secs(STORE_UNAVAILABLE_RETRY_SECS),
        }
    }

    /// Units left of the tightest limit (0 on a rejection), when the store decided.
    pub fn remaining(&self) -> Option<u64> {
        let d = self.decision.as_ref()?;
        if !self.forwards() || self.label == DecisionLabel::ShadowRejected {
            return Some(0);
        }
        d.tightest_limit().map(|i| d.limits[i].remaining())
    }

    /// The limit a response names (the rejecting one, else the tightest).
    pub fn limit_index(&self) -> Option<usize> {
        self.decision.as_ref()?.described_limit()
    }
}

/// Whether a delay route may wait on this call (the proxy path) or must answer at once (the
/// batch API, whose callers schedule their own retries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// Wait up to the route's `max_delay` for room.
    Allowed,
    /// Answer now.
    Never,
}

/// The limiter shared by the proxy path and the admin listener.
pub struct Limiter {
    store: Store,
    fallback: MemoryStore,
    deny_cache: DenyCache,
}

impl Limiter {
    /// A limiter deciding in `store`.
    pub fn new(store: Store) -> Limiter {
        Limiter {
            store,
            fallback: MemoryStore::new(),
            deny_cache: DenyCache::default(),
        }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The deny cache.
    pub fn deny_cache(&self) -> &DenyCache {
        &self.deny_cache
    }

    /// Decides one request of `policy`'s route for `key` (the derived key), counting it once.
    pub async fn decide(
        self: &Arc<Self>,
        policy: &Arc<RoutePolicy>,
        key: &str,
        cost: u64,
        waiting: Waiting,
    ) -> Verdict {
        let mut verdict = self.decide_one(policy, key, cost).await;
        if let (
            ExceedMode::Delay {
                max_delay,
                max_waiting,
            },
            Waiting::Allowed,
        ) = (&policy.config.on_exceed, waiting)
        {
            if verdict.label == DecisionLabel::Rejected {
                verdict = delay::wait_for_room(
                    self,
                    policy,
                    key,
                    cost,
                    verdict,
                    *max_delay,
                    *max_waiting,
                )
                .await;
            }
        }
        self.record(policy, &verdict);
        verdict
    }

    /// Decides many keys of one route in one go (few large store calls), in order, each
    /// exactly as [`Limiter::decide`] would without waiting, and counts each once.
    pub async fn decide_many(
        &self,
        policy: &RoutePolicy,
        keys: &[&str],
        cost: u64,
    ) -> Vec<Verdict> {
        let verdicts = self.decide_keys(policy, keys, cost).await;
        for v in &verdicts {
            self.record(policy, v);
        }
        verdicts
    }

    /// The verdict for an exempt client (uncounted by the store), counted once.
    pub fn exempt(&self, policy: &RoutePolicy) -> Verdict {
        let verdict = Verdict::new(DecisionLabel::Exempt, None, None);
        self.record(policy, &verdict);
        verdict
    }

    /// One key, straight through: deny cache, store, then [`Limiter::conclude`].
    async fn decide_one(
        self: &Arc<Self>,
        policy: &Arc<RoutePolicy>,
        key: &str,
        cost: u64,
    ) -> Verdict {
        if !policy.has_limits() {
            return Verdict::new(DecisionLabel::Allowed, None, None);
        }
        let tier = policy.tier_for(key);
        let base = decision_base(&policy.key_prefix, policy.name(), key);
        if let Some(verdict) = self.cached(policy, &base, tier, cost) {
            return verdict;
        }
        let request = DecisionRequest {
            limits: &tier.limits,
            base: &base,
            cost,
        };
        let started = Instant::now();
        let mut answer = Unfinished {
            answer: Some(self.store.submit(request)),
            limiter: self,
            policy,
            key,
            cost,
            started,
        };
        let result = answer.wait().await;
        self.conclude(policy, request, tier, result, started, started.elapsed())
    }

    /// Many keys of one route: the deny cache first, then one batch to the store for the rest.
    async fn decide_keys(&self, policy: &RoutePolicy, keys: &[&str], cost: u64) -> Vec<Verdict> {
        if !policy.has_limits() {
            return keys
                .iter()
                .map(|_| Verdict::new(DecisionLabel::Allowed, None, None))
                .collect();
        }
        let tiers: Vec<&Tier> = keys.iter().map(|k| policy.tier_for(k)).collect();
        let bases: Vec<String> = keys
            .iter()
            .map(|k| decision_base(&policy.key_prefix, policy.name(), k))
            .collect();
        let mut verdicts: Vec<Option<Verdict>> = bases
            .iter()
            .zip(&tiers)
            .map(|(base, tier)| self.cached(policy, base, tier, cost))
            .collect();
        let asked: Vec<usize> = (0..keys.len()).filter(|&i| verdicts[i].is_none()).collect();
        let requests: Vec<DecisionRequest<'_>> = asked
            .iter()
            .map(|&i| DecisionRequest {
                limits: &tiers[i].limits,
                base: &bases[i],
                cost,
            })
            .collect();
        let started = Instant::now();
        let results = self.store.decide_many(&requests, None).await;
        let elapsed = started.elapsed();
        for ((&i, request), result) in asked.iter().zip(&requests).zip(results) {
            verdicts[i] = Some(self.conclude(policy, *request, tiers[i], result, started, elapsed));
        }
        verdicts
            .into_iter()
            .map(|v| v.expect("every key decided"))
            .collect()
    }

    /// The deny cache's answer for a key, if it has one. A cached denial was decided for one
    /// unit: it answers requests of cost >= 1 on enforcing routes, never a cost-0 read.
    fn cached(&self, policy: &RoutePolicy, base: &str, tier: &Tier, cost: u64) -> Option<Verdict> {
        let enforcing = matches!(
            policy.config.on_exceed,
            ExceedMode::Reject | ExceedMode::Block { .. }
        );
        if !enforcing || cost == 0 {
            return None;
        }
        let now = Instant::now();
        let denial = self.deny_cache.get(base, now)?;
        policy.metrics.deny_cache_hits.inc();
        let decision = denial.current(now);
        let label = label_of_denial(decision.outcome);
        Some(Verdict::new(label, Some(decision), tier.name.as_ref()))
    }

    /// The rules after the store answered, once for both entry points: a failure applies the
    /// route's `on_error` (allow, deny, or the in-process fallback); a decision is measured, then
    /// labelled by the route's mode, and an enforced denial of one unit is remembered in the deny
    /// cache. Nothing is counted in `slidegate_requests_total` here (a delayed request is decided
    /// more than once).
    fn conclude(
        &self,
        policy: &RoutePolicy,
        request: DecisionRequest<'_>,
        tier: &Tier,
        result: Result<Decision, StoreError>,
        started: Instant,
        elapsed: Duration,
    ) -> Verdict {
        let tier_name = tier.name.as_ref();
        let decision = match result {
            Ok(d) => {
                policy
                    .metrics
                    .decision_duration
                    .store
                    .observe(elapsed.as_secs_f64());
                d
            }
            Err(e) => {
                log_store_error(policy.name(), &e);
                match policy.on_error {
                    OnError::Allow => {
                        return Verdict::new(DecisionLabel::StoreErrorAllowed, None, tier_name)
                    }
                    OnError::Deny => {
                        return Verdict::new(DecisionLabel::StoreErrorDenied, None, tier_name)
                    }
                    OnError::Local => {
                        let fallback_started = Instant::now();
                        let d = self.fallback.decide(request, None);
                        policy
                            .metrics
                            .decision_duration
                            .local
                            .observe(fallback_started.elapsed().as_secs_f64());
                        d
                    }
                }
            }
        };
        for (usage, histogram) in decision
            .limits
            .iter()
            .zip(&policy.metrics.limit_utilization)
        {
            histogram.observe(usage.used as f64 / usage.limit.max(1) as f64);
        }
        let mode = &policy.config.on_exceed;
        let label = match (decision.outcome, mode) {
            (Outcome::Allowed, _) => DecisionLabel::Allowed,
            (_, ExceedMode::Shadow) => DecisionLabel::ShadowRejected,
            (outcome, _) => {
                let enforcing = matches!(mode, ExceedMode::Reject | ExceedMode::Block { .. });
                if enforcing && request.cost == 1 {
                    self.deny_cache
                        .remember(request.base, started, &decision, mode);
                }
                // The exceed that starts a block counts as rejected, the 429s after it as blocked.
                label_of_denial(outcome)
            }
        };
        Verdict::new(label, Some(decision), tier_name)
    }

    /// Counts a final verdict: once in `slidegate_requests_total`, and, for every 429 and every
    /// shadow exceedance, once in `slidegate_limit_exceeded_total` under the limit it names.
    fn record(&self, policy: &RoutePolicy, verdict: &Verdict) {
        policy.metrics.decision(verdict.label);
        let mode = match verdict.label {
            DecisionLabel::Rejected | DecisionLabel::Blocked => 0,
            DecisionLabel::ShadowRejected => 1,
            _ => return,
        };
        if let Some(i) = verdict
            .decision
            .as_ref()
            .and_then(Decision::rejecting_limit)
        {
            policy.metrics.limit_exceeded[i][mode].inc();
        }
    }

    /// A key's usage without charging it (a cost-0 read, uncounted), for `/admin/usage`.
    pub async fn usage(
        &self,
        policy: &RoutePolicy,
        key: &str,
    ) -> Result<(Decision, Option<TierName>), StoreError> {
        let tier = policy.tier_for(key);
        let base = decision_base(&policy.key_prefix, policy.name(), key);
        let request = DecisionRequest {
            limits: &tier.limits,
            base: &base,
            cost: 0,
        };
        let decision = self.store.decide(request).await?;
        Ok((decision, tier.name.clone()))
    }

    /// Forgets a key's counts and block in the store, the fallback and this instance's deny
    /// cache. (Other instances hear of it through the store's reset channel.)
    pub async fn reset(&self, policy: &RoutePolicy, key: &str) -> Result<String, StoreError> {
        let base = decision_base(&policy.key_prefix, policy.name(), key);
        self.store
            .reset(&policy.tier_for(key).limits, &base)
            .await?;
        self.fallback.reset(&base);
        self.deny_cache.remove(&base);
        Ok(base)
    }
}

/// A decision on its way back from the store. If the request that asked is cancelled first (its
/// client disconnected), the decision still happened (Redis may have charged it), so dropping
/// this hands the answer to a task of its own that concludes and counts it.
struct Unfinished<'a> {
    answer: Option<Answer>,
    limiter: &'a Arc<Limiter>,
    policy: &'a Arc<RoutePolicy>,
    key: &'a str,
    cost: u64,
    started: Instant,
}

impl Unfinished<'_> {
    async fn wait(&mut self) -> Result<Decision, StoreError> {
        let result = self.answer.as_mut().expect("waited for once").await;
        self.answer = None;
        result
    }
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        let Some(answer) = self.answer.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (limiter, policy) = (self.limiter.clone(), self.policy.clone());
        let (key, cost, started) = (self.key.to_string(), self.cost, self.started);
        runtime.spawn(async move {
            let result = answer.await;
            let tier = policy.tier_for(&key);
            let base = decision_base(&policy.key_prefix, policy.name(), &key);
            let request = DecisionRequest {
                limits: &tier.limits,
                base: &base,
                cost,
            };
            let verdict =
                limiter.conclude(&policy, request, tier, result, started, started.elapsed());
            limiter.record(&policy, &verdict);
        });
    }
}

/// A store rejection's label: a key serving a block is `blocked`, anything else `rejected`.
fn label_of_denial(outcome: Outcome) -> DecisionLabel {
    match outcome {
        Outcome::Blocked => DecisionLabel::Blocked,
        _ => DecisionLabel::Rejected,
    }
}

/// Logs a store failure at most once a second (an outage would otherwise flood the log).
fn log_store_error(route: &str, error: &StoreError) {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let second = local_now_us() / 1_000_000;
    if LAST.swap(second, Ordering::Relaxed) != second {
        tracing::warn!(route, error = %error, "rate-limit store failed; applying on_error");
    }
}

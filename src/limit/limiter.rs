//! The [`Limiter`]: the deny cache, the store and the in-process fallback behind one decision,
//! and the rules applied once a decision is made (the route's `on_error`, its exceed mode, the
//! metrics), shared by the request path ([`super::Deciding`]) and the batch API.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::deny_cache::{denials_by_key, DenyCache, PARTS_DENIAL_KEPT};
use super::keys::RequestKeys;
use super::policy::RoutePolicy;
use super::tier::Tier;
use super::verdict::Verdict;
use crate::config::{ExceedMode, OnError};
use crate::metrics::{DecisionLabel, Metrics};
use crate::store::{
    local_now_us, Decision, DecisionRequest, EvictionTally, LimitSet, MemoryStore, NodeEviction,
    Outcome, Settlement, Store, StoreError,
};

/// The limiter shared by the request path and the admin listener.
pub struct Limiter {
    /// Where decisions are made (Redis or the memory store).
    pub(super) store: Store,
    /// The in-process store of `on_error = "local"`.
    pub(super) fallback: MemoryStore,
    /// Refusals remembered, answered without the store.
    pub(super) deny_cache: DenyCache,
    /// The gateway's metrics.
    pub(super) metrics: Metrics,
    /// The store's health as the logs report it.
    pub(super) health: crate::logging::StoreHealth,
    /// The store's evictions counted so far.
    evictions: EvictionTally,
}

impl Limiter {
    /// A limiter deciding in `store`; its in-process fallback and deny cache hold at most
    /// `max_keys` keys each; store failures it sees itself count in `metrics`.
    pub fn new(store: Store, max_keys: usize, metrics: Metrics) -> Limiter {
        Limiter {
            store,
            fallback: MemoryStore::new(max_keys),
            deny_cache: DenyCache::new(max_keys),
            metrics,
            health: Default::default(),
            evictions: EvictionTally::default(),
        }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Settles a decision's charge where it was made: in the store, or in the in-process
    /// fallback for a decision the fallback made (`local`: the store had failed). The
    /// settlement's instant is that store's (`at_us` is set here). Applied or queued before it
    /// returns (a decision asked for afterwards on the same lane sees it); no one waits for it,
    /// and a failure is logged where it is applied (no task per settlement).
    pub fn settle(&self, local: bool, settlement: Settlement) {
        if let Some(settlement) = self.settle_in_fallback_or_stamp(local, settlement) {
            self.store.settle_detached(settlement)
        }
    }

    /// Settles as [`Limiter::settle`] does and waits until the store has applied it (within
    /// the store's deadline for it): a decision asked for afterwards, on any connection, sees it.
    pub async fn settle_applied(
        &self,
        local: bool,
        settlement: Settlement,
    ) -> Result<(), StoreError> {
        match self.settle_in_fallback_or_stamp(local, settlement) {
            Some(settlement) => self.store.settle(settlement).await,
            None => Ok(()),
        }
    }

    /// Applies a settlement of the fallback's decision at once (`None` back); a store's is
    /// given its instant and handed back to be applied there.
    fn settle_in_fallback_or_stamp(
        &self,
        local: bool,
        mut settlement: Settlement,
    ) -> Option<Settlement> {
        if local {
            settlement.at_us = Some(local_now_us());
            self.fallback.settle(&settlement);
            return None;
        }
        settlement.at_us = self.store.settlement_instant();
        Some(settlement)
    }

    /// Room given back to `freed` limits of `limits` (indexes) for the keys `bases`: drops
    /// the deny-cache entries of their key slots here, so the store decides those keys again at
    /// once (it still holds any block); other instances' entries lapse at their own time.
    pub fn room_given_back(
        &self,
        limits: &LimitSet,
        bases: &[String],
        freed: impl IntoIterator<Item = usize>,
    ) {
        for i in freed {
            if let Some(base) = bases.get(limits.slot_of(i)) {
                self.deny_cache.remove(base);
            }
        }
    }

    /// The deny cache.
    pub fn deny_cache(&self) -> &DenyCache {
        &self.deny_cache
    }

    /// The metrics in Prometheus text, with the gauges read at scrape time (the deny cache's
    /// live entries) brought up to date first: what every `/metrics` serves.
    pub fn scrape(&self) -> String {
        let entries = self.deny_cache.live_entries(Instant::now());
        self.metrics.deny_cache_entries.set(entries as i64);
        let (replica_acks, replicas) = self.store.replicas();
        self.metrics.set_replicas(replica_acks, &replicas);
        self.metrics.encode()
    }

    /// Reads every Redis server's eviction policy and evicted keys, and counts the evictions
    /// not yet counted in `slidegate_store_evicted_keys_total`; `None` for the memory store or
    /// a Redis that did not answer.
    pub async fn refresh_evictions(&self) -> Option<Vec<NodeEviction>> {
        let nodes = self.store.eviction().await?.ok()?;
        let new = self.evictions.new_evictions(&nodes);
        self.metrics.store_evicted_keys.inc_by(new);
        Some(nodes)
    }

    /// Decides many keys of one route in one go (few large store calls), in order, each
    /// exactly as the request path would without waiting, and counts each once. A dry run
    /// decides as if but charges nothing.
    pub async fn decide_many(
        &self,
        policy: &RoutePolicy,
        keys: &[RequestKeys],
        cost: u64,
        dry_run: bool,
    ) -> Vec<Verdict> {
        if !policy.has_limits() {
            let allowed = || Verdict::new(DecisionLabel::Allowed, None, None);
            return keys.iter().map(|_| allowed()).collect();
        }
        let tiers: Vec<Option<&Arc<Tier>>> = keys
            .iter()
            .map(|k| policy.tier_for(k.route_key.as_deref().unwrap_or("")))
            .collect();
        let mut verdicts: Vec<Option<Verdict>> = keys
            .iter()
            .zip(&tiers)
            .map(|(k, tier)| match tier {
                Some(tier) if !dry_run => self.cached(policy, &k.bases, tier, cost),
                Some(_) => None,
                None => Some(Verdict::new(DecisionLabel::BadRequest, None, None)),
            })
            .collect();
        let asked: Vec<usize> = (0..keys.len()).filter(|&i| verdicts[i].is_none()).collect();
        let requests: Vec<DecisionRequest<'_>> = asked
            .iter()
            .map(|&i| DecisionRequest {
                limits: &tiers[i].expect("asked keys have a tier").limits,
                bases: &keys[i].bases,
                cost,
                dry_run,
                receipt: false,
            })
            .collect();
        let started = Instant::now();
        let results = self.store.decide_many(&requests, None).await;
        let elapsed = started.elapsed();
        for ((&i, request), result) in asked.iter().zip(&requests).zip(results) {
            let tier = tiers[i].expect("asked keys have a tier");
            let verdict = self.conclude(policy, *request, tier, result, started, elapsed);
            if !dry_run {
                self.note_blocks(policy, &verdict);
            }
            verdicts[i] = Some(verdict);
        }
        let verdicts: Vec<Verdict> = verdicts
            .into_iter()
            .map(|v| v.expect("every key decided"))
            .collect();
        if !dry_run {
            for v in &verdicts {
                self.record(policy, v);
            }
        }
        verdicts
    }

    /// The verdict for a request no limit counts (a route without limits, an exempt client),
    /// counted once under `label` (`allowed`, `exempt`).
    pub fn uncounted(&self, policy: &RoutePolicy, label: DecisionLabel) -> Verdict {
        let verdict = Verdict::new(label, None, None);
        self.record(policy, &verdict);
        verdict
    }

    /// Counts every limit of `policy` exceeded before any decision (a cost above each): an
    /// exceedance of each, enforced for `rejected`, in shadow mode for `shadow_rejected`; and,
    /// with `request`, the request under that label.
    pub fn record_unseen(&self, policy: &RoutePolicy, label: DecisionLabel, request: bool) {
        if request {
            policy.metrics.decision(label);
        }
        let mode = usize::from(label == DecisionLabel::ShadowRejected);
        for exceeded in &policy.metrics.limit_exceeded {
            exceeded[mode].inc();
        }
    }

    /// The deny cache's answer for a request, if one of its keys is held back, on enforcing
    /// routes. A cached denial was decided for one unit, or refused whatever the cost (a full
    /// `concurrency` key), so it refuses every cost; it answers a costlier request only where
    /// that request would wait as long ([`Decision::refuses_alike`]): otherwise more entries
    /// must leave a window first, and the store tells the exact wait. Each key is cached with
    /// its own limits' refusal: the request's cached keys are joined ([`Decision::join`]).
    pub(super) fn cached(
        &self,
        policy: &RoutePolicy,
        bases: &[String],
        tier: &Tier,
        cost: u64,
    ) -> Option<Verdict> {
        let enforcing = matches!(
            policy.config.on_exceed,
            ExceedMode::Reject | ExceedMode::Block(_)
        );
        if !enforcing || cost == 0 {
            return None;
        }
        let now = Instant::now();
        let alike = |d: &Decision| cost == 1 || d.refuses_alike(&tier.limits, cost);
        let mut joined: Option<Decision> = None;
        for base in bases {
            let Some(denial) = self.deny_cache.get(base, now) else {
                continue;
            };
            if !denial.answers(&tier.limits) {
                continue;
            }
            // one key's refusal that a costlier request would wait longer on: the store decides
            if !alike(&denial.decision) {
                return None;
            }
            match &mut joined {
                Some(decision) => decision.join(&denial.current(now)),
                None => joined = Some(denial.current(now)),
            }
        }
        let decision = joined?;
        policy.metrics.deny_cache_hits.inc();
        let label = label_of_denial(decision.outcome);
        Some(Verdict::new(label, Some(decision), tier.name.as_ref()))
    }

    /// The rules after the store answered, once for both entry points: a failure applies the
    /// route's `on_error` (allow, deny, or the in-process fallback); a decision is measured (one
    /// the in-process store's overflow sketch made counts as `kind="full"`), then
    /// labelled by the route's mode, and an enforced denial of one unit (or of attempts alone,
    /// whatever the cost) is remembered in the deny cache for the keys that refused. Nothing is
    /// counted in `slidegate_requests_total` here (a delayed request is decided more than
    /// once), and a dry run is measured nowhere.
    pub(super) fn conclude(
        &self,
        policy: &RoutePolicy,
        request: DecisionRequest<'_>,
        tier: &Tier,
        result: Result<Decision, StoreError>,
        started: Instant,
        elapsed: Duration,
    ) -> Verdict {
        let tier_name = tier.name.as_ref();
        let local = result.is_err();
        let decision = match result {
            Ok(d) => {
                self.health.answered(d.allowed());
                self.note_refusals(&request, &d);
                if !request.dry_run {
                    let histogram = &policy.metrics.decision_duration.store;
                    histogram.observe(elapsed.as_secs_f64());
                }
                d
            }
            Err(e) => match self.on_store_error(policy, request, e) {
                Ok(d) => d,
                Err(label) => return Verdict::new(label, None, tier_name),
            },
        };
        if !request.dry_run {
            if decision.approximate {
                // the in-process store (or fallback) was full: its overflow sketch decided
                self.metrics.count_store_full();
            }
            let utilization = decision
                .limits
                .iter()
                .zip(&policy.metrics.limit_utilization);
            for (usage, histogram) in utilization {
                histogram.observe(usage.used as f64 / usage.limit.max(1) as f64);
            }
        }
        let mode = &policy.config.on_exceed;
        let label = match (decision.outcome, mode) {
            (Outcome::Allowed, _) => DecisionLabel::Allowed,
            (_, ExceedMode::Shadow) => DecisionLabel::ShadowRejected,
            (outcome, _) => {
                let enforcing = matches!(mode, ExceedMode::Reject | ExceedMode::Block(_));
                // a refusal of one unit refuses every cost; so does one of attempts alone
                let one_unit =
                    request.cost == 1 || decision.refused_whatever_the_cost(request.limits);
                if enforcing && one_unit && !request.dry_run {
                    // A part of a request decided in parts may have refused on charges that
                    // another part's refusal then took back: it is kept a moment only.
                    let kept_for = self
                        .store
                        .decides_in_parts(request.limits)
                        .then_some(PARTS_DENIAL_KEPT);
                    for (base, denial) in denials_by_key(&decision, request) {
                        self.deny_cache.remember(
                            base,
                            started,
                            &denial,
                            mode,
                            request.limits,
                            kept_for,
                        );
                    }
                }
                // The exceed that starts a block counts as rejected, the 429s after it as blocked.
                label_of_denial(outcome)
            }
        };
        Verdict {
            local,
            ..Verdict::new(label, Some(decision), tier_name)
        }
    }

    /// A failed store call: the route's `on_error` says what the request gets, or the
    /// in-process fallback decides it.
    fn on_store_error(
        &self,
        policy: &RoutePolicy,
        request: DecisionRequest<'_>,
        error: StoreError,
    ) -> Result<Decision, DecisionLabel> {
        // Each decision the store failed counts once, whichever call carried it.
        if !request.dry_run {
            self.metrics.count_store_error(&error);
        }
        self.health.failed(&error);
        match policy.on_error {
            OnError::Allow => Err(DecisionLabel::StoreErrorAllowed),
            OnError::Deny => Err(DecisionLabel::StoreErrorDenied),
            OnError::Local => {
                let started = Instant::now();
                let decided = self.fallback.decide(request, None);
                let histogram = &policy.metrics.decision_duration.local;
                histogram.observe(started.elapsed().as_secs_f64());
                decided.map_err(|e| {
                    // (the fallback answers every decision: a full table counts in its
                    // overflow sketch; only a reply it cannot read fails, and fails open)
                    self.metrics.count_store_error(&e);
                    DecisionLabel::StoreErrorAllowed
                })
            }
        }
    }

    /// Counts a final verdict: once in `slidegate_requests_total`, and, for every 429 and every
    /// shadow exceedance, in `slidegate_limit_exceeded_total` once under each limit that refused
    /// it (every limit its `violated-policies` names).
    pub fn record(&self, policy: &RoutePolicy, verdict: &Verdict) {
        policy.metrics.decision(verdict.label);
        let mode = match verdict.label {
            DecisionLabel::Rejected | DecisionLabel::Blocked => 0,
            DecisionLabel::ShadowRejected => 1,
            _ => return,
        };
        let violated = verdict.decision.iter().flat_map(Decision::violated_limits);
        for i in violated {
            policy.metrics.limit_exceeded[i][mode].inc();
        }
    }
}

/// A store rejection's label: a key serving a block is `blocked`, anything else `rejected`.
fn label_of_denial(outcome: Outcome) -> DecisionLabel {
    match outcome {
        Outcome::Blocked => DecisionLabel::Blocked,
        _ => DecisionLabel::Rejected,
    }
}

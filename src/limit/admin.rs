//! What the admin listener asks of the limiter about keys an operator names ([`Target`]s, from
//! `lookup`): their usage without charging them (`GET /admin/usage`) and a reset that says
//! what it found (`DELETE /admin/usage`). Who is refused now (`GET /admin/blocked`) is in
//! `refused.rs`; a reset also takes the keys out of their route's refusal index.

use std::time::{Duration, Instant};

use super::limiter::Limiter;
use super::lookup::Target;
use super::policy::RoutePolicy;
use crate::store::layout;
use crate::store::refused::{material_of, member};
use crate::store::{DecisionRequest, LimitSet, LimitUsage, Outcome, Store, StoreError};
use crate::tier::TierName;

/// Keys' usage, for `/admin/usage`.
#[derive(Debug, Clone, Default)]
pub struct Usage {
    /// The limits reported, in the route's order.
    pub limits: Vec<LimitReport>,
    /// Time left of the longest block among the keys (zero when none is blocked).
    pub blocked: Duration,
    /// The highest block level among the keys (0 when none is remembered).
    pub block_level: u64,
    /// The longest time this instance's deny cache holds one of the keys back without asking
    /// the store.
    pub deny_cached: Duration,
    /// The segment or plan whose values applied to the route's own key.
    pub tier: Option<TierName>,
}

/// One limit's usage by the key it counts.
#[derive(Debug, Clone)]
pub struct LimitReport {
    /// The limit (its index in the route).
    pub index: usize,
    /// The key it counts.
    pub key: String,
    /// Its state.
    pub usage: LimitUsage,
}

/// One key slot a reset cleared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetSlot {
    /// The key slot.
    pub slot: usize,
    /// Its storage base (other instances forget it in their deny caches).
    pub base: String,
    /// Whether the store held anything for it (counts, a block, a block level).
    pub held: bool,
    /// The limits (indexes in the route) whose counts it cleared: every limit of the slot, or
    /// with a limit named, those that keep their state with it.
    pub limits: Vec<usize>,
}

impl Limiter {
    /// The usage of `targets` without charging them (cost-0 reads, uncounted). With `limit`,
    /// that limit alone; without, every limit of the slots that hold their key, or, when none
    /// does, of the route's own key (a fresh key shows the room it has).
    pub async fn usage(
        &self,
        policy: &RoutePolicy,
        targets: &[Target],
        limit: Option<usize>,
    ) -> Result<Usage, StoreError> {
        let shown = match limit {
            Some(_) => targets.to_vec(),
            None => self.holding(policy, targets).await?,
        };
        let mut usage = Usage::default();
        for target in &shown {
            self.slot_usage(policy, target, limit, &mut usage).await?;
        }
        usage.limits.sort_by_key(|l| l.index);
        Ok(usage)
    }

    /// The targets whose slot holds their key in the store; the route's own slot when none does.
    async fn holding(
        &self,
        policy: &RoutePolicy,
        targets: &[Target],
    ) -> Result<Vec<Target>, StoreError> {
        let mut held = Vec::new();
        for target in targets {
            let (part, _) = policy.default_tier().limits.part(target.slot);
            if self
                .store
                .held(&part, std::slice::from_ref(&target.base))
                .await?
                > 0
            {
                held.push(target.clone());
            }
        }
        if held.is_empty() {
            held.extend(
                targets
                    .iter()
                    .filter(|t| Some(t.slot) == policy.route_slot)
                    .cloned(),
            );
        }
        Ok(held)
    }

    /// Adds the usage of one slot's key to `into`: `limit`'s, or every limit of the slot.
    async fn slot_usage(
        &self,
        policy: &RoutePolicy,
        target: &Target,
        limit: Option<usize>,
        into: &mut Usage,
    ) -> Result<(), StoreError> {
        let tier = target.tier(policy);
        let (part, indexes) = tier.limits.part(target.slot);
        let bases = vec![target.base.clone()];
        let request = DecisionRequest {
            limits: &part,
            bases: &bases,
            cost: 0,
            dry_run: false,
            receipt: false,
        };
        let decision = self.store.decide(request).await?;
        for (k, &i) in indexes.iter().enumerate() {
            if limit.is_none_or(|wanted| wanted == i) {
                into.limits.push(LimitReport {
                    index: i,
                    key: target.key.clone(),
                    usage: decision.limits[k].clone(),
                });
            }
        }
        if decision.outcome == Outcome::Blocked {
            into.blocked = into.blocked.max(decision.retry_after);
        }
        into.block_level = into.block_level.max(decision.block_level);
        let now = Instant::now();
        if let Some(denied) = self.deny_cache.get(&target.base, now) {
            into.deny_cached = into
                .deny_cached
                .max(denied.until.saturating_duration_since(now));
        }
        if into.tier.is_none() {
            into.tier = tier.name.clone();
        }
        Ok(())
    }

    /// Forgets the targets' counts and blocks (levels included) in the store, the fallback and
    /// this instance's deny cache; answers, slot by slot, whether there was anything to forget.
    /// With `limit`, only that limit's state (and what shares it: two `sliding_log` limits of
    /// one key keep one set), and the key's block only when one of those limits started it (or
    /// no limit of the key's slot goes by its name any more): a slot in flight freed keeps the
    /// key's window counts, and a limit freed lifts no block another limit started.
    pub async fn reset(
        &self,
        policy: &RoutePolicy,
        targets: &[Target],
        limit: Option<usize>,
    ) -> Result<Vec<ResetSlot>, StoreError> {
        let fallback = Store::Memory(self.fallback.clone());
        let limits = &policy.default_tier().limits;
        let cleared = |t: &Target| cleared_limits(limits, t.slot, limit);
        let mut slots = Vec::with_capacity(targets.len());
        for target in targets {
            let (part, indexes) = limits.part(target.slot);
            let bases = vec![target.base.clone()];
            let named = limit.and_then(|i| indexes.iter().position(|&k| k == i));
            let held = match named {
                Some(k) => {
                    let names = cleared(target).into_iter().map(|i| &limits.limits[i].name);
                    let started = self.block_named(&part, &target.base).await?;
                    // a marker no limit of the slot goes by any more (a reload renamed, removed
                    // or moved its limit) is the slot's: any of its limits lifts it, level too
                    let lift = started.is_some_and(|s| {
                        part.named(0, &s).is_none() || names.into_iter().any(|n| *n == s)
                    });
                    self.store.reset_limit(&part, k, &bases, lift).await?
                        + fallback.reset_limit(&part, k, &bases, lift).await?
                }
                None => {
                    self.store.reset(&part, &bases).await? + fallback.reset(&part, &bases).await?
                }
            };
            self.deny_cache.remove(&target.base);
            slots.push(ResetSlot {
                slot: target.slot,
                base: target.base.clone(),
                held: held > 0,
                limits: cleared(target),
            });
        }
        // The index only lists, and a route's entries are checked against the store when listed:
        // one left behind (its node down) shows nothing (a domain's shows until it expires),
        // which must not fail the reset made above.
        if let Some(refusals) = &limits.refusals {
            let members: Vec<String> = targets
                .iter()
                .flat_map(|t| {
                    let material = material_of(&t.base);
                    (cleared(t).into_iter()).map(move |i| member(&limits.limits[i].name, material))
                })
                .collect();
            if let Err(e) = self.store.forget_refused(&refusals.index, &members).await {
                tracing::warn!(error = %e, "a reset key stays in the refusal index until it expires");
            }
        }
        Ok(slots)
    }
}

impl Limiter {
    /// The limit that started the block `base` keeps now, if any (on a route that blocks).
    async fn block_named(&self, part: &LimitSet, base: &str) -> Result<Option<String>, StoreError> {
        if part.block.is_none() {
            return Ok(None);
        }
        let marker = self.store.markers(&[layout::block_key(base)]).await?;
        Ok(marker.into_iter().flatten().next().map(|m| m.name))
    }
}

/// The limits of `slot` a reset clears: every one, or with `limit` named, those that keep their
/// state with it.
fn cleared_limits(limits: &LimitSet, slot: usize, limit: Option<usize>) -> Vec<usize> {
    let of_slot = (0..limits.limits.len()).filter(|&i| limits.slot_of(i) == slot);
    match limit {
        None => of_slot.collect(),
        Some(named) => {
            let state = limits.limits[named].state;
            of_slot
                .filter(|&i| limits.limits[i].state == state)
                .collect()
        }
    }
}

//! What the admin listener asks of the limiter: a key's usage without charging it
//! (`GET /admin/usage`), a reset on every instance (`DELETE /admin/usage`), and the keys a
//! route blocks now (`GET /admin/blocked`). With `limit=L` the key is that limit's own;
//! without, the route's.

use std::time::{Duration, Instant};

use super::keys::RequestKeys;
use super::policy::RoutePolicy;
use super::Limiter;
use crate::store::{layout, local_now_us, DecisionRequest, LimitUsage, Outcome, StoreError};
use crate::tier::TierName;

/// Most keys `/admin/blocked` lists.
pub const MAX_BLOCKED_LISTED: usize = 1000;

/// A key's usage, for `/admin/usage`.
#[derive(Debug, Clone)]
pub struct Usage {
    /// The limits reported (by index in the route) with their usage.
    pub limits: Vec<(usize, LimitUsage)>,
    /// Time left of the key's block (zero when not blocked).
    pub blocked: Duration,
    /// The key's block level (0 when none is remembered).
    pub block_level: u64,
    /// Time this instance's deny cache holds the key back without asking the store.
    pub deny_cached: Duration,
    /// The segment or plan whose values applied.
    pub tier: Option<TierName>,
}

/// One key blocked now, for `/admin/blocked`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockedKey {
    /// The derived key (hashed keys stay hashed).
    pub key: String,
    /// The limit named by the block.
    pub limit: String,
    /// Its level.
    pub block_level: u64,
    /// Time left.
    pub remaining: Duration,
}

/// The key slot and limits a usage or reset is about: `limit`'s (by name), or the route key's.
fn slot_and_limits(policy: &RoutePolicy, limit: Option<usize>) -> Option<(usize, Vec<usize>)> {
    let slot = match limit {
        Some(i) => policy.slot_of(i),
        None => policy.route_slot?,
    };
    let limits = match limit {
        Some(i) => vec![i],
        None => (0..policy.config.limits.len())
            .filter(|&i| policy.slot_of(i) == slot)
            .collect(),
    };
    Some((slot, limits))
}

impl Limiter {
    /// A key's usage without charging it (a cost-0 read, uncounted). `None` when the route has
    /// no limit counting the key asked about.
    pub async fn usage(
        &self,
        policy: &RoutePolicy,
        key: &str,
        limit: Option<usize>,
    ) -> Result<Option<Usage>, StoreError> {
        let Some((slot, reported)) = slot_and_limits(policy, limit) else {
            return Ok(None);
        };
        let tier = match policy.route_slot {
            Some(s) if s == slot => policy.tier_for(key).unwrap_or(policy.default_tier()),
            _ => policy.default_tier(),
        };
        let keys = RequestKeys::named(policy, key);
        let (part, indexes) = tier.limits.part(slot);
        let bases = vec![keys.bases[slot].clone()];
        let request = DecisionRequest {
            limits: &part,
            bases: &bases,
            cost: 0,
            dry_run: false,
            receipt: false,
        };
        let decision = self.store.decide(request).await?;
        let limits = reported
            .iter()
            .filter_map(|&i| {
                let k = indexes.iter().position(|&j| j == i)?;
                Some((i, decision.limits[k].clone()))
            })
            .collect();
        let now = Instant::now();
        let deny_cached = self
            .deny_cache
            .get(&keys.bases[slot], now)
            .map_or(Duration::ZERO, |d| d.until.saturating_duration_since(now));
        Ok(Some(Usage {
            limits,
            blocked: match decision.outcome {
                Outcome::Blocked => decision.retry_after,
                _ => Duration::ZERO,
            },
            block_level: decision.block_level,
            deny_cached,
            tier: tier.name.clone(),
        }))
    }

    /// Forgets a key's counts and block (level included) in the store, the fallback and this
    /// instance's deny cache; returns the bases reset, for the other instances. With `limit`,
    /// that limit's key; without, the route's.
    pub async fn reset(
        &self,
        policy: &RoutePolicy,
        key: &str,
        limit: Option<usize>,
    ) -> Result<Vec<String>, StoreError> {
        let Some((slot, _)) = slot_and_limits(policy, limit) else {
            return Ok(Vec::new());
        };
        let keys = RequestKeys::named(policy, key);
        let (part, _) = policy.default_tier().limits.part(slot);
        let bases = vec![keys.bases[slot].clone()];
        self.store.reset(&part, &bases).await?;
        crate::store::Store::Memory(self.fallback.clone())
            .reset(&part, &bases)
            .await?;
        for base in &bases {
            self.deny_cache.remove(base);
        }
        Ok(bases)
    }

    /// The keys of a route blocked now, newest first, at most [`MAX_BLOCKED_LISTED`].
    pub async fn blocked(&self, policy: &RoutePolicy) -> Result<Vec<BlockedKey>, StoreError> {
        let index = layout::blocked_index(&policy.key_prefix, policy.name());
        let members = self
            .store
            .recent_blocks(&index, MAX_BLOCKED_LISTED * 4)
            .await?;
        let mut candidates: Vec<(String, String)> = Vec::new();
        let mut markers: Vec<String> = Vec::new();
        for member in members {
            let Some((limit, key)) = member.split_once('|') else {
                continue;
            };
            let Some(i) = policy.config.limits.iter().position(|l| l.name == limit) else {
                continue;
            };
            let tag = &policy.slots[policy.slot_of(i)].tag;
            let base = layout::base_of_named(&policy.key_prefix, policy.name(), tag, key);
            let marker = layout::block_key(&base);
            if markers.contains(&marker) {
                continue;
            }
            markers.push(marker);
            candidates.push((key.to_string(), limit.to_string()));
        }
        let found = self.store.markers(&markers).await?;
        let now = local_now_us();
        let blocked = candidates
            .into_iter()
            .zip(found)
            .filter_map(|((key, _), marker)| {
                let m = marker.filter(|m| m.until > now)?;
                Some(BlockedKey {
                    key,
                    limit: m.name,
                    block_level: m.level,
                    remaining: Duration::from_micros(m.until - now),
                })
            })
            .take(MAX_BLOCKED_LISTED)
            .collect();
        Ok(blocked)
    }
}

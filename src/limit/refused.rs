//! Who is refused now (`GET /admin/blocked`). Every refusal a route answers is recorded in its
//! index in the store (`crate::store::refused`: by the decision itself, or after it in a Redis
//! Cluster, [`Limiter::note_refusals`]), so every instance lists the same keys, of every route:
//! window refusals of `reject` routes, blocks, forward-auth routes (routes like any other), and
//! an `[rls]` domain's descriptors. A route's candidates are then checked against the store
//! as it is now: one dry-run decision of its windows (batched, as the batch API's are) and one
//! read of its block marker each, at most [`MAX_BLOCKED_LISTED`], so a key lifted, reset by a
//! success or refunded since is not listed. A domain's entries (no blocks, no outcomes; an
//! operator's reset removes its entries) are listed as recorded.
//!
//! The wait shown is what a client is told: during a block, the longer of the block's remainder
//! and the windows' own wait (the `Retry-After` of a blocked 429); after it, the windows' wait
//! until the key is let in (an attempt before then is refused, and on a blocking route starts
//! the next block). Blocks started are also counted here (`slidegate_blocks_started_total`).

use std::sync::Arc;
use std::time::Duration;

use super::limiter::Limiter;
use super::lookup::Target;
use super::policy::RoutePolicy;
use super::verdict::Verdict;
use crate::config::ExceedMode;
use crate::metrics::DecisionLabel;
use crate::store::refused::{newest_first, refused_entries, split_member};
use crate::store::{layout, Decision, DecisionRequest, LimitSet, Marker, StoreError};

/// Most keys `/admin/blocked` lists (every entry a route's index keeps).
pub const MAX_BLOCKED_LISTED: usize = crate::store::refused::MAX_REFUSED;

/// Why a key is refused now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// It serves a block.
    Block,
    /// Its block has ended, and its window still has no room.
    Window,
}

impl Reason {
    /// As answers write it: `"block"`, `"window"`.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Block => "block",
            Reason::Window => "window",
        }
    }
}

/// A key refused now, for `/admin/blocked`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedKey {
    /// The key as stored (`layout::material`: a key over 64 bytes, or with characters a stored
    /// key avoids, as `#` and 32 hex digits; hashed key parts stay hashed).
    pub key: String,
    /// The limit a 429 would name: the block's, or the window's with the longest wait.
    pub limit: String,
    /// Its block level (0 when none is remembered).
    pub block_level: u64,
    /// The wait a client is told now.
    pub retry_after: Duration,
    /// Block or window.
    pub reason: Reason,
}

impl Limiter {
    /// When a decision started blocks (a charging exceed on a blocking route, decided by the
    /// store): counts each in `slidegate_blocks_started_total` under the limit it names.
    pub(super) fn note_blocks(&self, policy: &RoutePolicy, verdict: &Verdict) {
        let (ExceedMode::Block(_), Some(d)) = (&policy.config.on_exceed, &verdict.decision) else {
            return;
        };
        let limits = &policy.default_tier().limits;
        if verdict.label != DecisionLabel::Rejected || !d.starts_blocks(limits) {
            return;
        }
        for (_, named) in blocked_slots(policy, d, limits) {
            policy.metrics.blocks_started[named].inc();
        }
    }

    /// Records a store decision's refusal in its route's index when the decision could not
    /// (a Redis Cluster: the index lives on its own node), off the request's path. Only
    /// refusals write; an allowed decision costs nothing here.
    pub(super) fn note_refusals(&self, request: &DecisionRequest<'_>, decision: &Decision) {
        if request.dry_run || decision.allowed() || self.store.records_refusals() {
            return;
        }
        let Some(refusals) = &request.limits.refusals else {
            return;
        };
        let entries = refused_entries(request.limits, request.bases, request.cost, decision);
        if entries.is_empty() {
            return;
        }
        let (store, index) = (self.store.clone(), refusals.index.clone());
        tokio::spawn(async move {
            if let Err(e) = store.note_refused(&index, &entries).await {
                tracing::debug!(error = %e, "could not record a refusal for /admin/blocked");
            }
        });
    }

    /// The keys of `policy`'s route refused now: among `targets` when given (keys an operator
    /// names), else among the route's recorded refusals, newest first; at most
    /// [`MAX_BLOCKED_LISTED`].
    pub async fn refused(
        &self,
        policy: &RoutePolicy,
        targets: Option<&[Target]>,
    ) -> Result<Vec<RefusedKey>, StoreError> {
        if matches!(policy.config.on_exceed, ExceedMode::Shadow) {
            // a dry run: its breaches refuse no one
            return Ok(Vec::new());
        }
        let candidates = match targets {
            Some(targets) => targets.to_vec(),
            None => self.recorded(policy).await?,
        };
        let found = self.refusals(policy, &candidates).await?;
        Ok(found
            .into_iter()
            .flatten()
            .take(MAX_BLOCKED_LISTED)
            .collect())
    }

    /// The refusals recorded in `index` (an `[rls]` domain's), newest first, as recorded:
    /// each with its limit, and the time left by the store's clock.
    pub async fn refused_as_recorded(&self, index: &str) -> Result<Vec<RefusedKey>, StoreError> {
        let (now, mut entries) = self.store.refused_now(index, MAX_BLOCKED_LISTED).await?;
        newest_first(&mut entries);
        Ok(entries
            .into_iter()
            .filter_map(|r| {
                let (limit, key) = split_member(&r.member)?;
                Some(RefusedKey {
                    key: key.to_string(),
                    limit: limit.to_string(),
                    block_level: 0,
                    retry_after: Duration::from_micros(r.until_us.saturating_sub(now)),
                    reason: Reason::Window,
                })
            })
            .collect())
    }

    /// The key slots of the route's recorded refusals, newest first, once each.
    async fn recorded(&self, policy: &RoutePolicy) -> Result<Vec<Target>, StoreError> {
        let index = layout::blocked_index(&policy.key_prefix, policy.name());
        let (_, mut entries) = self.store.refused_now(&index, MAX_BLOCKED_LISTED).await?;
        newest_first(&mut entries);
        let mut targets: Vec<Target> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for entry in entries {
            let member = entry.member;
            let Some((limit, key)) = split_member(&member) else {
                continue;
            };
            let slots = match policy.config.limits.iter().position(|l| l.name == limit) {
                Some(i) => policy.slot_of(i)..policy.slot_of(i) + 1,
                // recorded by a limit a reload renamed or removed since: the key's slot is
                // whichever refuses it now (its window's count outlives the name)
                None => 0..policy.slots.len(),
            };
            for slot in slots {
                let tag = &policy.slots[slot].tag;
                let base = layout::base_of_named(&policy.key_prefix, policy.name(), tag, key);
                if seen.insert(base.clone()) {
                    targets.push(Target {
                        slot,
                        key: key.to_string(),
                        base,
                    });
                }
            }
        }
        Ok(targets)
    }

    /// For each candidate, whether and why it is refused now: one dry-run decision of its
    /// windows alone (no block) at what an attempt reserves, all in one batch, and its block
    /// marker.
    async fn refusals(
        &self,
        policy: &RoutePolicy,
        candidates: &[Target],
    ) -> Result<Vec<Option<RefusedKey>>, StoreError> {
        let mut windows = WindowSets::default();
        let sets: Vec<Arc<LimitSet>> = candidates.iter().map(|t| windows.of(policy, t)).collect();
        let bases: Vec<[String; 1]> = candidates.iter().map(|t| [t.base.clone()]).collect();
        // what an attempt reserves without a body: the route's `cost`, 1 for `json:PATH`
        let no_headers = http::HeaderMap::new();
        let costs = candidates.iter().map(|t| {
            let reservation = policy.reservation(t.tier(policy), None, &no_headers);
            reservation.unwrap_or(1)
        });
        let requests: Vec<DecisionRequest<'_>> = sets
            .iter()
            .zip(&bases)
            .zip(costs)
            .map(|((limits, bases), cost)| DecisionRequest {
                limits,
                bases,
                cost,
                dry_run: true,
                receipt: false,
            })
            .collect();
        let decisions = self.store.dry_runs_for_admin(&requests).await;
        let markers = match policy.config.on_exceed {
            ExceedMode::Block(_) => {
                let keys: Vec<String> = candidates
                    .iter()
                    .map(|t| layout::block_key(&t.base))
                    .collect();
                self.store.markers(&keys).await?
            }
            _ => vec![None; candidates.len()],
        };
        candidates
            .iter()
            .zip(decisions)
            .zip(markers)
            .zip(&sets)
            .map(|(((target, decision), marker), set)| Ok(refusal(target, &decision?, marker, set)))
            .collect()
    }
}

/// Whether a key is refused, from its windows' dry-run `decision` and its block `marker` (`set`:
/// the limits of the key's slot, which name the blocks that still refuse).
fn refusal(
    target: &Target,
    decision: &Decision,
    marker: Option<Marker>,
    set: &LimitSet,
) -> Option<RefusedKey> {
    let now = decision.decided_at_us;
    let window_wait = match decision.allowed() {
        true => Duration::ZERO,
        false => decision.retry_after,
    };
    let window_limit = decision
        .rejecting_limit()
        .map(|i| set.limits[i].name.clone());
    let level = marker.as_ref().map_or(0, |m| m.level);
    // a block whose limit a reload removed, renamed or gave another key refuses nothing (as
    // the store decides); `set` is the key's slot alone, its slot 0
    let blocking = marker.filter(|m| m.until > now && set.named(0, &m.name).is_some());
    let (reason, retry_after, limit) = match blocking {
        Some(block) => {
            let left = Duration::from_micros(block.until - now);
            match window_limit.filter(|_| window_wait > left) {
                Some(longer) => (Reason::Block, window_wait, longer),
                None => (Reason::Block, left, block.name),
            }
        }
        None => (Reason::Window, window_wait, window_limit?),
    };
    Some(RefusedKey {
        key: target.key.clone(),
        limit,
        block_level: level,
        retry_after,
        reason,
    })
}

/// The windows-only limit sets of one listing, made once per tier and slot (so the candidates
/// of one batch share their plan).
#[derive(Default)]
struct WindowSets {
    made: Vec<(usize, usize, Arc<LimitSet>)>,
}

impl WindowSets {
    /// The limits a candidate's key is decided with (its tier's, cut to its slot), no block.
    fn of(&mut self, policy: &RoutePolicy, target: &Target) -> Arc<LimitSet> {
        let tier = target.tier(policy);
        let id = Arc::as_ptr(tier) as usize;
        if let Some((_, _, set)) = self
            .made
            .iter()
            .find(|(t, s, _)| *t == id && *s == target.slot)
        {
            return set.clone();
        }
        let (part, _) = tier.limits.part(target.slot);
        let set = Arc::new(part.without_block());
        self.made.push((id, target.slot, set.clone()));
        set
    }
}

/// The key slots a charging exceed blocked, each with the limit that names its block: every
/// slot with a limit of `limits` whose refusal starts blocks, named by its longest wait (as
/// `lua/decide.lua` starts them).
fn blocked_slots(policy: &RoutePolicy, d: &Decision, limits: &LimitSet) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for i in d.limits_starting_blocks(limits) {
        let usage = &d.limits[i];
        let slot = policy.slot_of(i);
        match out.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, named)) if d.limits[*named].retry_after < usage.retry_after => *named = i,
            Some(_) => {}
            None => out.push((slot, i)),
        }
    }
    out
}

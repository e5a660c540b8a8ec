//! A request's limits decided: each charged group (one per cost, the largest first) in one
//! atomic decision through the limiter (a request refused by one descriptor of a group is
//! charged to none of it, and the groups after a refusal are only read), the read set
//! (`hits_addend` 0) beside them at cost 0. When a request has several charged groups, each
//! asks for a receipt, and a refusal by a later group takes back what the earlier ones charged
//! before the request is answered: a request refused by one descriptor is charged to none, and
//! a call made after its answer sees none of the charge. Between the charge and its take-back,
//! another request may meet it; the deny-cache entries of those keys are dropped with it, so
//! such a refusal is not served after the room is back.
//!
//! Shadow mode and quota mode are per descriptor here, where a route's mode is per route. A
//! set with such limits is decided with every limit first; when only shadow-mode or quota-mode
//! limits refuse, the request is refused if every quota-mode limit of the request is over (and
//! there is one), else the set is decided again with the limits that have room (its shadow-mode
//! ones only when none of them is over: enforced, they would have refused it), so it is charged
//! to those and answered as they say: a shadow-mode or quota-mode limit never lets a request
//! through the enforced ones uncharged.
//! The quota rule spans the request's groups ([`QuotaElsewhere`]): a group whose quota-mode
//! limits are all over goes on while an earlier group's had room or a later group has some,
//! and the last such group refuses (taking back what the earlier ones charged) when none had
//! room. The request is counted once, under its final decision.

use std::sync::Arc;

use super::limits::{Combo, Domain, Part};
use super::quota::{refused, QuotaElsewhere, RefusedBy};
use super::request::{LimitSetPlan, Plan};
use crate::limit::{Deciding, Limiter, RequestKeys, RoutePolicy, Verdict};
use crate::metrics::DecisionLabel;
use crate::store::{LimitSet, Receipt, Settlement};

/// A set's verdict, with the policies it was decided with (its decision, when there is one,
/// lists the set's limits in order).
pub struct Decided {
    /// The set's policies.
    pub combo: Arc<Combo>,
    /// What the limiter concluded.
    pub verdict: Verdict,
    /// Per limit of the set, whether its decision charged it.
    pub charged: Vec<bool>,
    /// Units its decision charged to each limit it charged and a later group's refusal took
    /// back (0: none): its statuses show those limits without them.
    pub taken_back: u64,
}

/// The charged groups' verdicts and the read set's.
pub struct Outcome {
    /// Per charged group of the plan, in order.
    pub charged: Vec<Decided>,
    /// Descriptors read only.
    pub read: Option<Decided>,
    /// Whether the request is refused (a group refused it, or a descriptor was refused before
    /// any decision).
    pub refused: bool,
}

impl Outcome {
    /// The set whose verdict the answer's headers show: the refusing group, else the one with
    /// the tightest limit (least remaining, then the soonest reset) of the charged groups and
    /// the descriptors read only, as a route's answer shows its tightest limit.
    pub fn shown(&self) -> Option<&Decided> {
        let tightest = |d: &&Decided| {
            let decision = d.verdict.decision.as_ref();
            let limit = decision.and_then(|d| Some(&d.limits[d.tightest_limit()?]));
            limit.map(|l| (l.remaining(), l.reset))
        };
        (self.charged.iter())
            .find(|d| !d.verdict.forwards())
            .or_else(|| {
                // a set the store gave no decision for (`None`) sorts after every other
                (self.charged.iter().chain(&self.read))
                    .min_by_key(|d| tightest(d).map_or((1, None), |t| (0, Some(t))))
            })
    }
}

/// Decides a request's sets, counting the request once.
pub async fn decide(limiter: &Arc<Limiter>, domain: &Domain, plan: &Plan) -> Outcome {
    let unseen_refusal = plan.refused_unseen();
    let mut refused = unseen_refusal;
    let mut charged: Vec<Decided> = Vec::with_capacity(plan.charged.len());
    // Receipts to take back when a later group refuses: only with more than one group.
    let mut taken = (plan.charged.len() > 1).then(Vec::new);
    let quota_in: Vec<bool> = (plan.charged.iter())
        .map(|g| domain.combo(&g.set.parts).quota.contains(&true))
        .collect();
    let mut quota = QuotaElsewhere::default();
    for (g, group) in plan.charged.iter().enumerate() {
        // After a refusal, and when a descriptor was refused before any decision, nothing more
        // is charged: the rest is read for its statuses.
        let cost = if refused { 0 } else { group.cost };
        let elsewhere = quota.before(quota_in[g + 1..].contains(&true));
        let set = &group.set;
        let Some(decided) = decide_set(limiter, domain, set, cost, elsewhere, taken.as_mut()).await
        else {
            continue;
        };
        quota.note(&decided.combo, &decided.verdict);
        if !refused && !decided.verdict.forwards() {
            take_back(limiter, taken.take().unwrap_or_default()).await;
            // every group before this one was allowed and charged its cost
            for (earlier, group) in charged.iter_mut().zip(&plan.charged) {
                earlier.taken_back = group.cost;
            }
        }
        refused |= !decided.verdict.forwards();
        charged.push(decided);
    }
    let read = decide_set(
        limiter,
        domain,
        &plan.read,
        0,
        QuotaElsewhere::default(),
        None,
    );
    let read = read.await;
    let counted = (charged.iter())
        .find(|d| !d.verdict.forwards())
        .or(charged.last())
        .or(read.as_ref());
    if refused && !plan.quota_over.is_empty() {
        // over before any decision, they refuse with the rest: an exceedance of each
        let over = domain.combo(&plan.quota_over);
        limiter.record_unseen(&over.all, DecisionLabel::Rejected, false);
    }
    if !plan.shadow_over.is_empty() {
        // counted as the request's decision only when nothing else counts it
        let alone = counted.is_none() && plan.refused.is_empty();
        let over = domain.combo(&plan.shadow_over);
        limiter.record_unseen(&over.all, DecisionLabel::ShadowRejected, alone);
    }
    match counted {
        _ if !plan.refused.is_empty() => {
            let refusing = domain.combo(&plan.refused);
            limiter.record_unseen(&refusing.all, DecisionLabel::Rejected, true);
        }
        Some(d) if unseen_refusal => {
            limiter.uncounted(&d.combo.all, DecisionLabel::Rejected);
        }
        Some(d) => limiter.record(&d.combo.all, &d.verdict),
        None => {}
    }
    Outcome {
        charged,
        read,
        refused,
    }
}

/// What an allowed group charged, to take back if a later group refuses the request.
struct Taken {
    limits: Arc<LimitSet>,
    bases: Vec<String>,
    receipt: Receipt,
    /// Whether the in-process fallback made the charge (the store had failed).
    local: bool,
}

/// Decides a policy's limits with `keys` at `cost`, uncounted; with `taken`, the charge's
/// receipt goes there.
async fn decide_keys(
    limiter: &Arc<Limiter>,
    policy: &Arc<RoutePolicy>,
    keys: Arc<RequestKeys>,
    cost: u64,
    taken: Option<&mut Vec<Taken>>,
) -> Verdict {
    let tier = policy.default_tier().clone();
    let limits = tier.limits.clone();
    let deciding = Deciding::new(limiter.clone(), policy.clone(), tier, keys.clone(), cost);
    let deciding = match taken.is_some() {
        true => deciding.with_receipt(),
        false => deciding,
    };
    let verdict = deciding.uncounted().await;
    let receipt = verdict.decision.as_ref().and_then(|d| d.receipt.clone());
    if let (Some(taken), Some(receipt)) = (taken, receipt) {
        taken.push(Taken {
            limits,
            bases: keys.bases.clone(),
            receipt,
            local: verdict.local,
        });
    }
    verdict
}

/// Gives back what earlier groups of a refused request charged, and waits until the store has
/// applied it (a call made after the answer sees the room, on any connection); then drops the
/// deny-cache entries of those keys, which a refusal met while the charge stood may have made.
async fn take_back(limiter: &Arc<Limiter>, taken: Vec<Taken>) {
    let refunds = taken.into_iter().map(|t| async move {
        let (limits, bases) = (t.limits.clone(), t.bases.clone());
        let every = 0..t.limits.limits.len();
        let settlement = Settlement {
            refund: every.clone().collect(),
            confirm: Vec::new(),
            unanswered: Vec::new(),
            reset: Vec::new(),
            settle_to: Vec::new(),
            at_us: None,
            limits: t.limits,
            bases: t.bases,
            receipt: t.receipt,
            tags: Vec::new(),
        };
        if let Err(e) = limiter.settle_applied(t.local, settlement).await {
            tracing::warn!(error = %e, "taking back a refused request's charge failed");
        }
        limiter.room_given_back(&limits, &bases, every);
    });
    futures_util::future::join_all(refunds).await;
}

/// Decides one set at `cost` (0: only read), uncounted, under the quota rule as the rest of the
/// request leaves it; with `taken`, what it charged is noted there.
async fn decide_set(
    limiter: &Arc<Limiter>,
    domain: &Domain,
    set: &LimitSetPlan,
    cost: u64,
    quota: QuotaElsewhere,
    mut taken: Option<&mut Vec<Taken>>,
) -> Option<Decided> {
    if set.parts.is_empty() {
        return None;
    }
    let combo = domain.combo(&set.parts);
    let keys = Arc::new(RequestKeys::per_slot(&combo.all, set.keys.clone()));
    let first = decide_keys(limiter, &combo.all, keys, cost, taken.as_deref_mut()).await;
    let (verdict, decided_with) = match &combo.enforced {
        None if !combo.shadow.iter().chain(&combo.quota).any(|&s| s) => (first, None),
        _ => without_soft(limiter, domain, &combo, set, (cost, quota), first, taken).await,
    };
    let allowed = cost > 0 && (verdict.decision.as_ref()).is_some_and(|d| d.allowed());
    let charged = match decided_with {
        None => vec![allowed; set.parts.len()],
        Some(kept) => (0..set.parts.len())
            .map(|i| allowed && kept.contains(&i))
            .collect(),
    };
    Some(Decided {
        combo,
        verdict,
        charged,
        taken_back: 0,
    })
}

/// The verdict of a set with shadow-mode or quota-mode limits, from its decision with every
/// limit, at `cost` under the quota rule as the rest of the request leaves it; with the limits
/// (indices in the set) its decision was made with, when not every one.
async fn without_soft(
    limiter: &Arc<Limiter>,
    domain: &Domain,
    combo: &Combo,
    set: &LimitSetPlan,
    (cost, elsewhere): (u64, QuotaElsewhere),
    first: Verdict,
    taken: Option<&mut Vec<Taken>>,
) -> (Verdict, Option<Vec<usize>>) {
    let Some(decision) = first.decision.as_ref().filter(|d| !d.allowed()) else {
        return (first, None);
    };
    let over: Vec<bool> = decision.limits.iter().map(|u| u.exceeded()).collect();
    if (0..over.len()).any(|i| over[i] && combo.enforces(i)) {
        return (refused(combo, first, RefusedBy::Enforced), None);
    }
    let quota: Vec<usize> = (0..over.len()).filter(|&i| combo.quota[i]).collect();
    if !quota.is_empty() && quota.iter().all(|&i| over[i]) && !elsewhere.room {
        let wait = elsewhere.wait;
        return (refused(combo, first, RefusedBy::Quota(wait)), None);
    }
    // Decided again with the limits that have room: the enforced ones (none is over here), the
    // quota-mode ones the cost fits, and the shadow-mode ones unless one of them is over (were
    // they enforced, the request would be refused and charged to none of them, as a route in
    // shadow mode does).
    let shadow_over = (0..over.len()).any(|i| over[i] && combo.shadow[i]);
    let kept: Vec<usize> = (0..over.len())
        .filter(|&i| !(over[i] || shadow_over && combo.shadow[i]))
        .collect();
    let policy = match &combo.enforced {
        Some((policy, enforced)) if *enforced == kept => policy.clone(),
        _ => {
            let parts: Vec<Part> = kept.iter().map(|&i| set.parts[i].clone()).collect();
            domain.combo(&parts).all.clone()
        }
    };
    let mut merged = decision.clone();
    let second = match kept.is_empty() {
        true => None,
        false => {
            let keys = kept.iter().map(|&i| set.keys[i].clone()).collect();
            let keys = Arc::new(RequestKeys::per_slot(&policy, keys));
            Some(decide_keys(limiter, &policy, keys, cost, taken).await)
        }
    };
    let Some(second) = second else {
        // Nothing to charge (shadow-mode limits, and quota-mode ones over while another
        // group's have room): the request goes on.
        let label = match shadow_over {
            true => DecisionLabel::ShadowRejected,
            false => DecisionLabel::Allowed,
        };
        return (Verdict { label, ..first }, Some(kept));
    };
    if let Some(d) = &second.decision {
        for (k, &i) in kept.iter().enumerate() {
            merged.limits[i] = d.limits[k].clone();
        }
        merged.outcome = d.outcome;
        merged.retry_after = d.retry_after;
    }
    let verdict = Verdict {
        label: match second.label {
            DecisionLabel::Allowed if shadow_over => DecisionLabel::ShadowRejected,
            other => other,
        },
        decision: second.decision.is_some().then_some(merged),
        ..second
    };
    match verdict.label {
        DecisionLabel::Rejected => (refused(combo, verdict, RefusedBy::Enforced), Some(kept)),
        _ => (verdict, Some(kept)),
    }
}

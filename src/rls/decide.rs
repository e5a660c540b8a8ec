//! A request's limits decided: the charged set in one atomic decision through the limiter (a
//! request refused by one descriptor is charged to none), the read set (`hits_addend` 0) beside
//! it at cost 0.
//!
//! Shadow mode is per descriptor here, where a route's is per route. A set with limits of both
//! kinds is decided with every limit first; when only shadow-mode limits refuse, it is decided
//! again with the enforced limits alone, so the request is charged to those and answered as
//! they say, and a shadow-mode limit never lets a request through uncharged. The request is
//! counted once, under its final decision: the charged set's, or the read set's when nothing
//! is charged.

use std::sync::Arc;
use std::time::Duration;

use super::limits::{Combo, Domain};
use super::request::{LimitSetPlan, Plan};
use crate::limit::{Deciding, Limiter, RequestKeys, Verdict};
use crate::metrics::DecisionLabel;

/// A set's verdict, with the policies it was decided with (its decision, when there is one,
/// lists the set's limits in order).
pub struct Decided {
    /// The set's policies.
    pub combo: Arc<Combo>,
    /// What the limiter concluded.
    pub verdict: Verdict,
}

/// The charged set's verdict and the read set's.
pub struct Outcome {
    /// Descriptors charged `plan.cost`.
    pub charged: Option<Decided>,
    /// Descriptors read only.
    pub read: Option<Decided>,
}

/// Decides a request's sets, counting the request once.
pub async fn decide(limiter: &Arc<Limiter>, domain: &Domain, plan: &Plan) -> Outcome {
    let read_counts = plan.charged.parts.is_empty();
    let charged = decide_set(limiter, domain, &plan.charged, plan.cost, true);
    let read = decide_set(limiter, domain, &plan.read, 0, read_counts);
    let (charged, read) = futures_util::future::join(charged, read).await;
    Outcome { charged, read }
}

/// Decides one set at `cost`; `counted` says whether its verdict is the request's count in
/// the metrics.
async fn decide_set(
    limiter: &Arc<Limiter>,
    domain: &Domain,
    set: &LimitSetPlan,
    cost: u64,
    counted: bool,
) -> Option<Decided> {
    if set.parts.is_empty() {
        return None;
    }
    let combo = domain.combo(&set.parts);
    let keys = Arc::new(RequestKeys::per_slot(&combo.all, set.keys.clone()));
    let tier = combo.all.default_tier().clone();
    let deciding = Deciding::new(limiter.clone(), combo.all.clone(), tier, keys, cost);
    let verdict = match (&combo.enforced, counted) {
        (None, true) => deciding.await,
        (None, false) => deciding.uncounted().await,
        (Some(_), _) => {
            let first = deciding.uncounted().await;
            let verdict = without_shadow(limiter, &combo, set, cost, first).await;
            if counted {
                limiter.record(&combo.all, &verdict);
            }
            verdict
        }
    };
    Some(Decided { combo, verdict })
}

/// The verdict of a set with limits of both kinds, from its decision with every limit.
async fn without_shadow(
    limiter: &Arc<Limiter>,
    combo: &Combo,
    set: &LimitSetPlan,
    cost: u64,
    first: Verdict,
) -> Verdict {
    let Some(decision) = first.decision.as_ref().filter(|d| !d.allowed()) else {
        return first;
    };
    let enforced_refused =
        (0..decision.limits.len()).any(|i| decision.limits[i].exceeded() && !combo.shadow[i]);
    if enforced_refused {
        return refused(combo, first);
    }
    let (policy, kept) = combo.enforced.as_ref().expect("a set of both kinds");
    let keys = kept.iter().map(|&i| set.keys[i].clone()).collect();
    let keys = Arc::new(RequestKeys::per_slot(policy, keys));
    let tier = policy.default_tier().clone();
    let second = Deciding::new(limiter.clone(), policy.clone(), tier, keys, cost)
        .uncounted()
        .await;
    let mut merged = decision.clone();
    if let Some(d) = &second.decision {
        for (k, &i) in kept.iter().enumerate() {
            merged.limits[i] = d.limits[k].clone();
        }
        merged.outcome = d.outcome;
        merged.retry_after = d.retry_after;
    }
    let verdict = Verdict {
        label: match second.label {
            DecisionLabel::Allowed => DecisionLabel::ShadowRejected,
            other => other,
        },
        decision: second.decision.is_some().then_some(merged),
        ..second
    };
    match verdict.label {
        DecisionLabel::Rejected => refused(combo, verdict),
        _ => verdict,
    }
}

/// A refusal by enforced limits: the shadow-mode limits' own waits are left out, so the answer
/// and the metrics name an enforced limit.
fn refused(combo: &Combo, mut verdict: Verdict) -> Verdict {
    verdict.label = DecisionLabel::Rejected;
    if let Some(d) = &mut verdict.decision {
        let mut wait = Duration::ZERO;
        for (i, usage) in d.limits.iter_mut().enumerate() {
            if combo.shadow[i] {
                usage.retry_after = Duration::ZERO;
            } else {
                wait = wait.max(usage.retry_after);
            }
        }
        d.retry_after = wait;
    }
    verdict
}

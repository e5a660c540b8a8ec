//! The quota rule across a request's charged groups ([`QuotaElsewhere`]): a request is refused
//! by its quota-mode limits only when every one of them is over; and the verdict of a set that
//! refuses ([`refused`]), by an enforced limit or by that rule, with the wait its answer gives.

use std::time::Duration;

use super::limits::Combo;
use crate::limit::Verdict;
use crate::metrics::DecisionLabel;

/// What the rest of a request tells the quota rule as one charged group is decided: the rule
/// refuses only when every quota-mode limit of the request is over, so a group whose quota-mode
/// limits are all over refuses only when no other group's had room or may have.
#[derive(Debug, Default, Clone, Copy)]
pub struct QuotaElsewhere {
    /// A quota-mode limit of an earlier group had room, or a later group has one (undecided).
    pub room: bool,
    /// The soonest wait of the quota-mode limits of earlier groups, all over.
    pub wait: Option<Duration>,
}

impl QuotaElsewhere {
    /// What the groups decided so far say, for a group followed by quota-mode limits or not.
    pub fn before(self, later_quota: bool) -> QuotaElsewhere {
        QuotaElsewhere {
            room: self.room || later_quota,
            ..self
        }
    }

    /// Adds what a group's `verdict` says of its quota-mode limits (`combo`'s).
    pub fn note(&mut self, combo: &Combo, verdict: &Verdict) {
        let Some(decision) = &verdict.decision else {
            return;
        };
        let quota = (decision.limits.iter().enumerate()).filter(|&(i, _)| combo.quota[i]);
        for (_, usage) in quota {
            match usage.exceeded() {
                true => {
                    let wait = usage.retry_after;
                    self.wait = Some(self.wait.map_or(wait, |w| w.min(wait)));
                }
                false => self.room = true,
            }
        }
    }
}

/// What refuses a set's request.
pub enum RefusedBy {
    /// An enforced limit over.
    Enforced,
    /// Every quota-mode limit of the request over: these, and those of earlier groups, whose
    /// soonest wait is given.
    Quota(Option<Duration>),
}

/// A refusal by enforced limits, or by every quota-mode limit being over: the other limits'
/// waits are left out, so the answer and the metrics name a refusing limit; a quota refusal
/// lasts until the first quota-mode limit of the request has room again.
pub fn refused(combo: &Combo, mut verdict: Verdict, by: RefusedBy) -> Verdict {
    verdict.label = DecisionLabel::Rejected;
    let (by_quota, mut wait) = match by {
        RefusedBy::Enforced => (false, None),
        RefusedBy::Quota(earlier) => (true, earlier),
    };
    if let Some(d) = &mut verdict.decision {
        for (i, usage) in d.limits.iter_mut().enumerate() {
            if combo.shadow[i] {
                usage.retry_after = Duration::ZERO;
                continue;
            }
            // An enforced refusal waits for its slowest enforced limit; a quota refusal for
            // the first quota-mode limit with room.
            if !usage.exceeded() || combo.quota[i] != by_quota {
                continue;
            }
            wait = Some(match (wait, by_quota) {
                (None, _) => usage.retry_after,
                (Some(w), true) => w.min(usage.retry_after),
                (Some(w), false) => w.max(usage.retry_after),
            });
        }
        d.retry_after = wait.unwrap_or(d.retry_after);
    }
    verdict
}

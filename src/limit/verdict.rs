//! A [`Verdict`]: what the limiter concluded for one request or key, and what the answer
//! takes from it (whether it is forwarded, its wait, the quota left, the limit it names).

use std::time::Duration;

use crate::metrics::DecisionLabel;
use crate::store::Decision;
use crate::tier::TierName;

/// The `Retry-After` of a 503 when the store is unavailable and the route fails closed.
pub const STORE_UNAVAILABLE_RETRY_SECS: u64 = 1;

/// What the limiter concluded for one request or key.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The request's one entry in `slidegate_requests_total`.
    pub label: DecisionLabel,
    /// The store's (or the fallback's, or the deny cache's) decision; `None` when the store
    /// failed and the route allows or denies without deciding, and for exempt clients.
    pub decision: Option<Decision>,
    /// The segment or plan whose values applied.
    pub tier: Option<TierName>,
    /// Decided by the in-process fallback because the store failed (`on_error = "local"`).
    pub local: bool,
}

impl Verdict {
    pub(super) fn new(
        label: DecisionLabel,
        decision: Option<Decision>,
        tier: Option<&TierName>,
    ) -> Verdict {
        Verdict {
            label,
            decision,
            tier: tier.cloned(),
            local: false,
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

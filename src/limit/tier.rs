//! One set of limit values a route applies: the route's own, or a segment's or plan's.

use std::sync::Arc;

use http::HeaderValue;

use super::refusal::Refusal;

use crate::store::LimitSet;
use crate::tier::TierName;

/// One set of limit values: the route's own, or a segment's or plan's.
#[derive(Debug)]
pub struct Tier {
    /// `None` for the route's own values.
    pub name: Option<TierName>,
    /// The limits as the stores apply them.
    pub limits: Arc<LimitSet>,
    /// `RateLimit-Policy` for these values (`None` when the route has no limits).
    pub policy_header: Option<HeaderValue>,
    /// The parts of its 429 that no decision changes.
    pub refusal: Refusal,
}

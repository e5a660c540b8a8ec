//! What a request reserves of the limits whose answer states its cost (`cost`, section
//! "Cost from the response" of the README): a fixed number, or one read from the request's
//! JSON body, refused when its limits could never take it at once.

use super::policy::RoutePolicy;
use super::tier::Tier;
use crate::config::ExceedMode;
use crate::cost::{CostOutOfRange, Reserve};

impl RoutePolicy {
    /// What a request of this route with `tier`'s values reserves: the route's `cost` (read
    /// from the JSON `body` for `json:PATH`, 1 when it states no whole number there, at least
    /// 1; a number spelled so that parsers read it otherwise, `5e3` or `5000.0`, which a
    /// server that coerces it reads as many units, reserves the most a limit takes); 1 on a
    /// route without `cost_from`. A cost above the smallest `cost_from` limit in force could
    /// never be allowed: it is refused as [`CostOutOfRange`], except on a `shadow` route, which
    /// refuses nothing. One within it is held at most at that limit's `burst`, when smaller (a
    /// gcra key never takes more at once; the answer then charges what it states).
    pub fn reservation(
        &self,
        tier: &Tier,
        body: Option<&[u8]>,
        headers: &http::HeaderMap,
    ) -> Result<u64, CostOutOfRange> {
        let cost_limits = || {
            (self.config.limits.iter().zip(&tier.limits.limits))
                .filter(|(c, _)| c.cost_from.is_some())
        };
        let smallest = cost_limits().map(|(_, l)| l.limit).min().unwrap_or(1);
        let wanted = match &self.reserve {
            None => return Ok(1),
            Some(Reserve::Units(n)) => *n,
            Some(Reserve::Json(path)) => {
                match body.map(|b| crate::key::json_body_value(headers, b, path)) {
                    Some(Ok(Some(v))) => crate::cost::whole_number(&v).unwrap_or(1),
                    Some(Err(_)) => smallest,
                    Some(Ok(None)) | None => 1,
                }
            }
        };
        let at_once = (cost_limits().map(|(c, l)| c.most_at_once(l.limit)))
            .min()
            .unwrap_or(1);
        let shadow = matches!(self.config.on_exceed, ExceedMode::Shadow);
        match wanted.max(1) {
            // a dry run refuses nothing: it is decided held at what the limit takes
            cost if cost > smallest && !shadow => Err(CostOutOfRange {
                cost,
                most: smallest,
            }),
            cost => Ok(cost.min(at_once)),
        }
    }
}

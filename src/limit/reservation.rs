//! What a request reserves of the limits whose answer states its cost (`cost`, section
//! "Cost from the response" of the README): a fixed number, or one read from the request's
//! JSON body, refused when its limits could never take it at once or when the body states it
//! twice.

use super::policy::RoutePolicy;
use super::tier::Tier;
use crate::config::ExceedMode;
use crate::cost::{CostOutOfRange, Reserve};
use crate::key::ReadError;

impl RoutePolicy {
    /// What a request of this route with `tier`'s values reserves: the route's `cost` (read
    /// from the JSON `body` for `json:PATH` as [`stated`] says); 1 on a route without
    /// `cost_from`. A cost below 1 or above the smallest `cost_from` limit in force could never
    /// be allowed, and a cost stated twice is unclear: both are refused as
    /// [`CostOutOfRange`], except on a `shadow` route, which refuses nothing. One within range
    /// is held at most at that limit's `burst`, when smaller (a gcra key never takes more at
    /// once; the answer then charges what it states).
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
        let at_once = (cost_limits().map(|(c, l)| c.most_at_once(l.limit)))
            .min()
            .unwrap_or(1);
        let shadow = matches!(self.config.on_exceed, ExceedMode::Shadow);
        let stated = match (&self.reserve, body) {
            (None, _) => return Ok(1),
            (Some(Reserve::Units(n)), _) => Stated::Whole(i128::from(*n)),
            (Some(Reserve::Json(path)), Some(body)) => stated(headers, body, path),
            (Some(Reserve::Json(_)), None) => Stated::Whole(1),
        };
        let wanted = match stated {
            // a dry run refuses nothing: it is decided held at what the limit takes
            _ if shadow => return Ok(stated.units(smallest).min(at_once).max(1)),
            Stated::Ambiguous(path) => return Err(CostOutOfRange::Ambiguous { path }),
            stated => stated,
        };
        let cost = wanted.units(smallest);
        if !(1..=smallest).contains(&cost) {
            return Err(CostOutOfRange::Range {
                cost: wanted.to_string(),
                most: smallest,
            });
        }
        Ok(cost.min(at_once))
    }
}

/// What a request body states at a reservation's `json:PATH`.
#[derive(Debug, Clone, PartialEq)]
enum Stated {
    /// A whole number: a plain integer, or a string of one (1 when the body states no number
    /// there: a missing member, another type, text that is no number, a body that is not JSON).
    Whole(i128),
    /// A number spelled so that parsers read it otherwise (`5000.0`, `5e3`, digits beyond
    /// 2^53, or such text in a string): its value as a double reads it. A server that coerces
    /// it reads that many.
    Spelled(f64),
    /// The member named twice (or in a folded spelling).
    Ambiguous(String),
}

impl Stated {
    /// The units it asks for: a spelled number within `most` asks for `most` (what it comes to
    /// is unclear, so it holds the most a limit takes); out of range, a value below 1 or above
    /// `most`, as such.
    fn units(&self, most: u64) -> u64 {
        match *self {
            Stated::Whole(n) => u64::try_from(n).unwrap_or(if n < 0 { 0 } else { u64::MAX }),
            Stated::Spelled(v) if v < 1.0 => 0,
            Stated::Spelled(v) if v > most as f64 => u64::MAX,
            Stated::Spelled(_) | Stated::Ambiguous(_) => most,
        }
    }
}

impl std::fmt::Display for Stated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stated::Whole(n) => write!(f, "{n}"),
            Stated::Spelled(v) => write!(f, "{v}"),
            Stated::Ambiguous(path) => write!(f, "{path}"),
        }
    }
}

/// What `body` states at `path`, read as a key part reads it.
fn stated(headers: &http::HeaderMap, body: &[u8], path: &[String]) -> Stated {
    match crate::key::json_body_value(headers, body, path) {
        Ok(Some(text)) => std::str::from_utf8(&text).map_or(Stated::Whole(1), written),
        Ok(None) => Stated::Whole(1),
        Err(ReadError::Ambiguous) => Stated::Ambiguous(path.join(".")),
        Err(ReadError::Unclear { written: text, .. }) => written(&text),
    }
}

/// A number as written (a JSON number, or a string a server may coerce to one, spaces around it
/// included): a whole one as such, another as a double reads it, and 1 for text that is none.
fn written(text: &str) -> Stated {
    let text = text.trim();
    match (text.parse::<i128>(), text.parse::<f64>()) {
        (Ok(n), _) => Stated::Whole(n),
        (_, Ok(v)) => Stated::Spelled(v),
        _ => Stated::Whole(1),
    }
}

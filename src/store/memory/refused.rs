//! The memory store's twin of the refusal index (`crate::store::refused`): per route, each
//! refused key's member, when its refusal ends and when it was decided; at most `MAX_REFUSED`
//! entries (the latest-ending), those that ended dropped as the index is read or written, as a
//! Redis sorted set trimmed by rank and read by score would keep them.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::store::refused::{Recorded, Refused, MAX_REFUSED};

/// One route's index: member -> (end, instant) (µs).
type RouteIndex = HashMap<String, (u64, u64)>;

/// Every route's index.
#[derive(Default)]
pub struct RefusedIndex {
    routes: Mutex<HashMap<String, RouteIndex>>,
}

impl RefusedIndex {
    /// Records `entries` in `index` at `now` (nothing to do, and no lock taken, for none: an
    /// allowed decision's call).
    pub fn note(&self, index: &str, entries: &[Refused], now: u64) {
        if entries.is_empty() {
            return;
        }
        let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        let route = routes.entry(index.to_string()).or_default();
        route.retain(|_, (until, _)| *until > now);
        for e in entries {
            route.insert(e.member.clone(), (e.until_us, e.at_us));
        }
        while route.len() > MAX_REFUSED {
            let soonest = route
                .iter()
                .min_by_key(|(member, (until, _))| (*until, (*member).clone()))
                .map(|(member, _)| member.clone());
            match soonest {
                Some(member) => route.remove(&member),
                None => break,
            };
        }
    }

    /// The entries of `index` whose refusal has not ended at `now`, latest-ending first, at
    /// most `n`.
    pub fn current(&self, index: &str, n: usize, now: u64) -> Vec<Recorded> {
        let routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        let Some(route) = routes.get(index) else {
            return Vec::new();
        };
        let mut live: Vec<Recorded> = route
            .iter()
            .filter(|(_, (until, _))| *until > now)
            .map(|(m, (until, at))| Recorded {
                member: m.clone(),
                until_us: *until,
                at_us: *at,
            })
            .collect();
        live.sort_by(|a, b| (b.until_us, &b.member).cmp(&(a.until_us, &a.member)));
        live.truncate(n);
        live
    }

    /// Removes `members` from `index` (a key an operator lifted).
    pub fn forget(&self, index: &str, members: &[String]) {
        let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(route) = routes.get_mut(index) {
            for m in members {
                route.remove(m);
            }
        }
    }
}

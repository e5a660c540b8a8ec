//! The memory store's twin of the refusal index (`crate::store::refused`): per route, each
//! refused key's member and when its refusal ends; at most `MAX_REFUSED` entries (the
//! latest-ending), those that ended dropped as the index is read or written, as a Redis sorted
//! set trimmed by rank and read by score would keep them.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::store::refused::{Refused, MAX_REFUSED};

/// Every route's index: member -> end (µs).
#[derive(Default)]
pub struct RefusedIndex {
    routes: Mutex<HashMap<String, HashMap<String, u64>>>,
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
        route.retain(|_, until| *until > now);
        for e in entries {
            route.insert(e.member.clone(), e.until_us);
        }
        while route.len() > MAX_REFUSED {
            let soonest = route
                .iter()
                .min_by_key(|(member, until)| (**until, (*member).clone()))
                .map(|(member, _)| member.clone());
            match soonest {
                Some(member) => route.remove(&member),
                None => break,
            };
        }
    }

    /// The entries of `index` whose refusal has not ended at `now`, latest-ending first, at
    /// most `n`.
    pub fn current(&self, index: &str, n: usize, now: u64) -> Vec<(String, u64)> {
        let routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        let Some(route) = routes.get(index) else {
            return Vec::new();
        };
        let mut live: Vec<(String, u64)> = route
            .iter()
            .filter(|(_, until)| **until > now)
            .map(|(m, u)| (m.clone(), *u))
            .collect();
        live.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
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

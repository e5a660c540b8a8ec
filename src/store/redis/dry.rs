//! A dry run's decisions (`"dry_run": true`) go to Redis in calls of their own, which the script
//! runs without writing: each call must hold every decision of one key, so that a key met again
//! sees the charges of its earlier decisions as in the real run.

use std::collections::HashMap;

use fred::types::Key;

use super::batch::{Pending, MAX_PER_CALL, MAX_UNITS_PER_CALL};

/// A dry run's decisions cut into calls: every decision of one key (the same keys) in the same
/// call, so a key met again sees the charges of its earlier decisions as in the real run; a call
/// takes whole keys up to [`MAX_PER_CALL`] decisions and [`MAX_UNITS_PER_CALL`] units (one key's
/// decisions are never cut, whatever their number). Each decision keeps its own reply, so the
/// order between keys does not matter.
pub fn calls(pendings: Vec<Pending>) -> Vec<Vec<Pending>> {
    let mut groups: Vec<Vec<Pending>> = Vec::new();
    let mut index: HashMap<Vec<Key>, usize> = HashMap::new();
    for p in pendings {
        match index.get(&p.keys) {
            Some(&g) => groups[g].push(p),
            None => {
                index.insert(p.keys.clone(), groups.len());
                groups.push(vec![p]);
            }
        }
    }
    let mut calls: Vec<Vec<Pending>> = Vec::new();
    let mut units = 0;
    for group in groups {
        let group_units: u64 = group.iter().map(|p| p.cost).sum();
        let fits = calls.last().is_some_and(|call| {
            call.len() + group.len() <= MAX_PER_CALL && units + group_units <= MAX_UNITS_PER_CALL
        });
        if fits {
            calls.last_mut().expect("checked").extend(group);
            units += group_units;
        } else {
            calls.push(group);
            units = group_units;
        }
    }
    calls
}

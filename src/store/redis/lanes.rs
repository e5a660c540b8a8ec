//! Which lane a decision goes to ([`Lanes`]): the one lane of a standalone server or a
//! sentinel's master, or in a cluster the lane of the primary that serves the slot of the
//! decision's keys (one per primary, made on first use, dropped when the slot table loses its
//! node: its driver ends once its calls are answered).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use fred::types::config::Server;
use fred::types::Key;

use super::call::{Caller, Target};
use super::lane::Lane;
use super::nodes::Nodes;
use super::slots::slot_of;

/// One worker's lanes.
#[derive(Default)]
pub struct Lanes {
    /// Standalone and sentinel: the one lane, found without a lock.
    single: OnceLock<Lane>,
    /// Cluster: one lane per primary (`None`: per key, while the slot table is unknown), and
    /// the table generation they were last pruned for.
    by_node: RwLock<(HashMap<Option<Server>, Lane>, u64)>,
}

impl Lanes {
    /// The lane of the node serving `keys` (they share one hash tag, so one slot).
    pub fn for_keys(&self, nodes: &Nodes, caller: &Arc<Caller>, keys: &[Key]) -> Lane {
        if !nodes.is_cluster() {
            return self
                .single
                .get_or_init(|| Lane::start(caller.clone(), Target::ByKey))
                .clone();
        }
        let slot = keys.first().map_or(0, |k| slot_of(k.as_bytes()));
        let table = nodes.table().unwrap_or_default();
        let node = table.primary(slot).cloned();
        if node.is_none() {
            nodes.request_refresh();
        }
        let generation = nodes.generation();
        {
            let lanes = self.by_node.read().unwrap_or_else(|e| e.into_inner());
            if let (Some(lane), true) = (lanes.0.get(&node), lanes.1 == generation) {
                return lane.clone();
            }
        }
        let mut lanes = self.by_node.write().unwrap_or_else(|e| e.into_inner());
        if lanes.1 != generation {
            // A node that left the table takes its lane along; its driver ends once idle.
            let primaries = table.primaries();
            lanes
                .0
                .retain(|server, _| server.as_ref().is_none_or(|s| primaries.contains(s)));
            lanes.1 = generation;
        }
        let target = node.clone().map_or(Target::PerSlot, Target::Node);
        lanes
            .0
            .entry(node)
            .or_insert_with(|| Lane::start(caller.clone(), target))
            .clone()
    }
}

//! How a route's limits sit in key slots and states, shared by every tier of the route: limits
//! that count the same key share a slot (one hash tag in Redis), and limits of one slot and
//! algorithm share a state (one Redis key) when they count the same way. A slot's tag keeps its
//! Redis keys apart from every other slot's.

use sha2::{Digest, Sha256};
use std::sync::Arc;

use super::headers::policy_header;
use super::key_slot::KeySlot;
use super::refusal::Refusal;
use super::tier::Tier;
use crate::config::{ExceedMode, KeySpec, OnMissingKey, RouteConfig};
use crate::store::layout::push_hex;
use crate::store::{BlockSpec, Limit, LimitSet, Refusals, StateSpec};
use crate::tier::TierName;

/// A slot's tag: `""` for the route's own key and setting, else `~` and a hash of the spec (and
/// of the setting where it is not the route's), so that two slots never share a Redis key.
fn slot_tag(route: &RouteConfig, spec: &KeySpec, on_missing: OnMissingKey) -> String {
    match (spec == &route.key, on_missing == route.on_missing_key) {
        (true, true) => String::new(),
        (_, true) => format!("~{}", short_hash(&spec.to_string())),
        (_, false) => format!("~{}", short_hash(&format!("{spec}|{}", on_missing.name()))),
    }
}

/// How a route's limits sit in key slots and states; every tier shares it.
pub(super) struct Layout {
    pub(super) slots: Vec<KeySlot>,
    pub(super) route_slot: Option<usize>,
    /// Per limit: its state's index.
    state_of: Vec<usize>,
    states: Vec<StateSpec>,
    /// The longest a reservation stays in flight (µs): the route's upstream timeouts.
    pub(super) settle_us: u64,
    /// The longest wait a refusal on reservations in flight tells (µs): the upstream's
    /// `timeout` (0: no bound but `settle_us`).
    pub(super) flight_wait_us: u64,
}

impl Layout {
    /// Each limit on a slot of its own, tagged `tags[i]`, in a state of its own.
    pub(super) fn given(route: &RouteConfig, tags: Vec<String>) -> Layout {
        let slots: Vec<KeySlot> = tags
            .into_iter()
            .map(|tag| KeySlot {
                spec: route.key.clone(),
                on_missing: route.on_missing_key,
                tag,
                tags_sent: false,
            })
            .collect();
        let states = route
            .limits
            .iter()
            .enumerate()
            .map(|(slot, l)| StateSpec {
                algorithm: l.algorithm,
                slot,
                suffix: l.algorithm.get().key_suffix().to_string(),
            })
            .collect();
        Layout {
            route_slot: slots.iter().position(|s| s.tag.is_empty()),
            slots,
            state_of: (0..route.limits.len()).collect(),
            states,
            settle_us: 0,
            flight_wait_us: 0,
        }
    }

    pub(super) fn of(route: &RouteConfig) -> Layout {
        let mut slots: Vec<KeySlot> = Vec::new();
        let mut states: Vec<StateSpec> = Vec::new();
        let mut state_of = Vec::with_capacity(route.limits.len());
        for l in &route.limits {
            let spec = l.key.as_ref().unwrap_or(&route.key);
            let on_missing = l.on_missing_key.unwrap_or(route.on_missing_key);
            let slot = match slots
                .iter()
                .position(|s| &s.spec == spec && s.on_missing == on_missing)
            {
                Some(i) => i,
                None => {
                    slots.push(KeySlot {
                        spec: spec.clone(),
                        on_missing,
                        tag: slot_tag(route, spec, on_missing),
                        tags_sent: false,
                    });
                    slots.len() - 1
                }
            };
            let algorithm = l.algorithm;
            let mut suffix = algorithm.get().key_suffix().to_string();
            if algorithm.get().shares_charges() && (l.counts_outcomes() || l.cost_from.is_some()) {
                // a state records a request once for every limit sharing it: limits settled
                // apart (by other statuses, to amounts from other sources) keep states apart
                let mut class = format!(
                    "{}/{}",
                    l.count_status
                        .as_ref()
                        .map_or(String::new(), |s| s.to_string()),
                    l.reset_status
                        .as_ref()
                        .map_or(String::new(), |s| s.to_string())
                );
                if let Some(from) = &l.cost_from {
                    class.push_str(&format!("/{from}"));
                }
                suffix.push('.');
                suffix.push_str(&short_hash(&class));
            }
            let state = match states
                .iter()
                .position(|s| s.algorithm == algorithm && s.slot == slot && s.suffix == suffix)
            {
                Some(i) => i,
                None => {
                    states.push(StateSpec {
                        algorithm,
                        slot,
                        suffix,
                    });
                    states.len() - 1
                }
            };
            state_of.push(state);
            // a success forgives only the value it sent, where the key merges values
            if l.reset_status.is_some() && spec.merging_part().is_some() {
                slots[slot].tags_sent = true;
            }
        }
        let route_slot = slots.iter().position(|s| s.tag.is_empty());
        Layout {
            slots,
            route_slot,
            state_of,
            states,
            settle_us: 0,
            flight_wait_us: 0,
        }
    }

    /// The limits of `route` with the values `value(i)` for limit `i`, recording their
    /// refusals as `refusals` says.
    pub(super) fn tier(
        &self,
        name: Option<TierName>,
        route: &RouteConfig,
        refusals: &Option<Refusals>,
        value: impl Fn(usize) -> u64,
    ) -> Arc<Tier> {
        let block = match &route.on_exceed {
            ExceedMode::Block(b) => Some(BlockSpec {
                block_ms: b.block_for.as_millis().max(1) as u64,
                growth: b.growth,
                max_ms: b.max.as_millis() as u64,
                forget_ms: b.forget.as_millis() as u64,
            }),
            _ => None,
        };
        // beside limits whose cost the answer states (charged the reservation), the others
        // count attempts: one unit each
        let reserves = route.limits.iter().any(|l| l.cost_from.is_some());
        let limits = route
            .limits
            .iter()
            .enumerate()
            .map(|(i, l)| Limit {
                name: l.name.clone(),
                limit: value(i),
                window_us: l.window.as_micros().max(1) as u64,
                param: l.burst.unwrap_or(0),
                state: self.state_of[i],
                per_attempt: l.algorithm.get().per_attempt() || (reserves && l.cost_from.is_none()),
                starts_blocks: l.algorithm.get().starts_blocks(),
                settle_us: match l.counts_outcomes() {
                    true => self.settle_us,
                    false => 0,
                },
                flight_wait_us: match l.counts_outcomes() {
                    true => self.flight_wait_us,
                    false => 0,
                },
                counts_outcomes: l.counts_outcomes(),
            })
            .collect();
        let set = LimitSet::new(block, limits, self.states.clone(), self.slots.len())
            .recording(refusals.clone());
        let policy_header = policy_header(&route.limits, &set);
        let refusal = Refusal::new(&route.name, &set, name.as_ref(), policy_header.as_ref());
        Arc::new(Tier {
            name,
            limits: Arc::new(set),
            policy_header,
            refusal,
        })
    }
}

/// Eight hex digits of the SHA-256 of `text`: a short, stable name for a key spec or a class.
pub(super) fn short_hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    let mut out = String::with_capacity(8);
    push_hex(&mut out, &digest[..4]);
    out
}

//! What an admin request names: the key slots of a route it is about and the key in each, from
//! a key as logs and `/admin/blocked` show it (`key=`), or from the raw values a person knows
//! (`value=`, one per key part), derived per slot exactly as the traffic path derives them
//! (normalised, cut, hashed), so a support desk can type "Carol" or "0812 3456 7890".

use crate::key::{key_of_values, ValueContext, ValueError};
use crate::store::layout;

use std::sync::Arc;

use super::policy::RoutePolicy;
use super::tier::Tier;

/// How an operator names a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    /// The derived key itself (a hashed one as `#` and 32 hex digits).
    Key(String),
    /// One raw value per key part, in the key's order (any bytes, as a header's).
    Values(Vec<Vec<u8>>),
}

/// One key slot an admin request is about, and the key asked about in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The key slot.
    pub slot: usize,
    /// The derived key in that slot (as logs show it, for a key named so).
    pub key: String,
    /// Its storage base (`layout::base`).
    pub base: String,
}

impl Target {
    /// The values its key is decided with: the route's own key picks a segment or plan (the
    /// route's values for a key on no plan, as an operator asks about it anyway); a limit's own
    /// key has the route's values.
    pub fn tier<'p>(&self, policy: &'p RoutePolicy) -> &'p Arc<Tier> {
        match policy.route_slot {
            Some(s) if s == self.slot => {
                policy.tier_for(&self.key).unwrap_or(policy.default_tier())
            }
            _ => policy.default_tier(),
        }
    }
}

/// The slots `named` reaches on `policy`: `limit`'s (by index) alone, or every slot of the route.
/// A key reaches each slot as it is; values reach each slot whose key they make, and an error
/// names the part they could not fill when they make none (or not `limit`'s).
pub fn targets(
    policy: &RoutePolicy,
    named: &Named,
    limit: Option<usize>,
) -> Result<Vec<Target>, ValueError> {
    let slots: Vec<usize> = match limit {
        Some(i) => vec![policy.slot_of(i)],
        None => (0..policy.slots.len()).collect(),
    };
    let values = match named {
        Named::Key(key) => {
            let target = |slot: usize| Target {
                slot,
                key: key.clone(),
                base: layout::base_of_named(
                    &policy.key_prefix,
                    policy.name(),
                    &policy.slots[slot].tag,
                    key,
                ),
            };
            return Ok(slots.into_iter().map(target).collect());
        }
        Named::Values(values) => values,
    };
    let values: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    let ctx = ValueContext {
        secret: policy.hash_secret.as_ref(),
        ipv6_prefix: policy.ipv6_prefix,
        path_case: policy.path_case,
    };
    let mut made = Vec::with_capacity(slots.len());
    let mut first_error = None;
    for slot in slots {
        match key_of_values(&policy.slots[slot].spec, &values, &ctx) {
            Ok(key) => made.push(Target {
                slot,
                base: layout::base(
                    &policy.key_prefix,
                    policy.name(),
                    &policy.slots[slot].tag,
                    &key,
                ),
                key,
            }),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match (made.is_empty(), first_error) {
        (true, Some(e)) => Err(e),
        _ => Ok(made),
    }
}

/// The key an answer names for `targets`: the route's own key when it is among them, else the
/// first.
pub fn shown_key<'t>(policy: &RoutePolicy, targets: &'t [Target]) -> Option<&'t str> {
    targets
        .iter()
        .find(|t| Some(t.slot) == policy.route_slot)
        .or_else(|| targets.first())
        .map(|t| t.key.as_str())
}

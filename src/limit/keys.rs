//! The keys of one request: the derived key of each key slot its route's limits count, their
//! storage bases, and the tier (segment or plan) the route's own key picks.

use crate::config::OnMissingKey;
use crate::key::{derive_key, derive_key_and_sent, sent_tag, KeyError, KeySource};
use crate::store::layout;

use super::policy::RoutePolicy;

/// One request's keys, by slot.
#[derive(Debug, Clone, Default)]
pub struct RequestKeys {
    /// The derived key of each slot.
    pub keys: Vec<String>,
    /// The storage base of each slot (`layout::base`).
    pub bases: Vec<String>,
    /// The route's own key (it picks the segment or plan), when it was derived.
    pub route_key: Option<String>,
    /// Per slot, the tag of the values the request sent (`~` and hex) where the slot's key
    /// merges values and a reset may forgive it; `""` otherwise. Empty for keys not derived
    /// from a request.
    pub tags: Vec<String>,
}

/// Why a request has no keys: a part it lacks or names twice, or a key on no plan.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeysError {
    /// A key part is missing or ambiguous.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// `[plans] unknown = "reject"` and the key is on no plan.
    #[error("the key is on no plan")]
    UnknownKey,
}

impl RequestKeys {
    /// Derives every slot's key from the request.
    pub fn derive(policy: &RoutePolicy, src: &KeySource<'_>) -> Result<RequestKeys, KeysError> {
        let mut keys = Vec::with_capacity(policy.slots.len());
        let mut tags = Vec::new();
        for (i, slot) in policy.slots.iter().enumerate() {
            if !slot.tags_sent {
                keys.push(derive_key(&slot.spec, slot.on_missing, src)?);
                continue;
            }
            let (key, sent) = derive_key_and_sent(&slot.spec, slot.on_missing, src)?;
            keys.push(key);
            tags.resize(i, String::new());
            tags.push(sent_tag(&sent, src.hash_secret));
        }
        if !tags.is_empty() {
            tags.resize(policy.slots.len(), String::new());
        }
        let route_key = match policy.route_slot {
            Some(i) => Some(keys[i].clone()),
            // Limits that all count keys of their own: the route's key still picks the tier.
            None if policy.has_tiers() => {
                Some(derive_key(&policy.config.key, OnMissingKey::Ip, src)?)
            }
            None => None,
        };
        let mut keys = RequestKeys::from_keys(policy, keys, route_key);
        keys.tags = tags;
        Ok(keys)
    }

    /// The keys a batch call or an admin request names: `key` for every slot.
    pub fn given(policy: &RoutePolicy, key: &str) -> RequestKeys {
        let keys = vec![key.to_string(); policy.slots.len()];
        RequestKeys::from_keys(policy, keys, Some(key.to_string()))
    }

    /// Keys the caller derived itself, one per slot in slot order (the rate-limit service: a
    /// key per matched descriptor).
    pub fn per_slot(policy: &RoutePolicy, keys: Vec<String>) -> RequestKeys {
        RequestKeys::from_keys(policy, keys, None)
    }

    /// The keys an operator names in `/admin/usage`: `key` for every slot, where a key shown
    /// hashed (`#` and 32 hex digits) names the key it stands for.
    pub fn named(policy: &RoutePolicy, key: &str) -> RequestKeys {
        let bases = policy
            .slots
            .iter()
            .map(|slot| layout::base_of_named(&policy.key_prefix, policy.name(), &slot.tag, key))
            .collect();
        RequestKeys {
            keys: vec![key.to_string(); policy.slots.len()],
            bases,
            route_key: Some(key.to_string()),
            tags: Vec::new(),
        }
    }

    fn from_keys(policy: &RoutePolicy, keys: Vec<String>, route_key: Option<String>) -> Self {
        let bases = keys
            .iter()
            .zip(&policy.slots)
            .map(|(k, slot)| layout::base(&policy.key_prefix, policy.name(), &slot.tag, k))
            .collect();
        RequestKeys {
            keys,
            bases,
            route_key,
            tags: Vec::new(),
        }
    }

    /// The key logs and answers show for the decision: the route's own key, else the first.
    pub fn shown(&self) -> Option<&str> {
        self.route_key
            .as_deref()
            .or_else(|| self.keys.first().map(String::as_str))
    }
}

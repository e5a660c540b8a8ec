//! A store that may forget counts: the warning for a Redis whose `maxmemory-policy` evicts
//! (every limit key has a TTL, so `volatile-*` policies reach them as surely as `allkeys-*`),
//! and the tally that turns each server's `evicted_keys` into one counter that only grows
//! (`slidegate_store_evicted_keys_total`: summed over a cluster's primaries; a server whose
//! count went down restarted, and its new count is all new evictions).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::{NodeEviction, RedisStore, Store, StoreError};
use crate::config::StoreConfig;

impl Store {
    /// Every Redis server's policy and evictions; `None` for the memory store (it evicts
    /// nothing: a full one counts keys it does not hold in its sketch).
    pub async fn eviction(&self) -> Option<Result<Vec<NodeEviction>, StoreError>> {
        match self {
            Store::Redis(redis) => Some(redis.eviction().await),
            Store::Memory(_) => None,
        }
    }
}

/// The warning for each server of `nodes` whose policy may evict limit keys; `url` is the store
/// as logs show it (redacted), naming the one server of a standalone store.
pub fn eviction_warnings(nodes: &[NodeEviction], url: &str) -> Vec<String> {
    nodes
        .iter()
        .filter(|n| n.may_evict())
        .map(|n| {
            let server = n.node.as_deref().unwrap_or(url);
            format!(
                "store: the Redis at {server} has maxmemory-policy `{}`: when it runs out of memory it evicts keys, limit keys included (each has a TTL), and a key's count (an attacker's quota) is silently forgotten; set `maxmemory-policy noeviction` (slidegate_store_evicted_keys_total counts what it evicted: {})",
                n.policy, n.evicted_keys
            )
        })
        .collect()
}

/// Each server's `evicted_keys` as last read, turned into evictions not yet counted.
#[derive(Default)]
pub struct EvictionTally {
    last: Mutex<HashMap<Option<String>, u64>>,
}

impl EvictionTally {
    /// The evictions `nodes` report beyond the last reading: per server, its growth (all of
    /// its count the first time it is read, and after it restarted).
    pub fn new_evictions(&self, nodes: &[NodeEviction]) -> u64 {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let mut new = 0;
        for n in nodes {
            let before = last.insert(n.node.clone(), n.evicted_keys);
            new += match before {
                Some(b) if b <= n.evicted_keys => n.evicted_keys - b,
                _ => n.evicted_keys,
            };
        }
        new
    }
}

/// What `slidegate check` asks: the policy and evictions of every server of `config`'s Redis
/// when it answers within `wait`; `Ok(None)` for the memory store or a Redis that does not
/// answer (it may not be reachable from where `check` runs); the error of a Redis that answered
/// but refused the credentials ([`StoreError::Refused`]).
pub async fn probe_eviction(
    config: &StoreConfig,
    wait: Duration,
) -> Result<Option<Vec<NodeEviction>>, StoreError> {
    if config.backend != crate::config::Backend::Redis {
        return Ok(None);
    }
    let quiet: super::OnError = std::sync::Arc::new(|_: &StoreError| {});
    let Ok(redis) = RedisStore::connect(config, quiet, &[]).await else {
        return Ok(None);
    };
    match redis.wait_until_connected(wait).await {
        Ok(()) => Ok(redis.eviction().await.ok()),
        Err(refused @ StoreError::Refused(_)) => Err(refused),
        Err(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, policy: &str, evicted_keys: u64) -> NodeEviction {
        NodeEviction {
            node: Some(name.to_string()),
            policy: policy.to_string(),
            evicted_keys,
        }
    }

    #[test]
    fn the_tally_grows_by_each_servers_growth_and_survives_a_restart() {
        let tally = EvictionTally::default();
        assert_eq!(
            tally.new_evictions(&[node("a", "x", 5), node("b", "x", 2)]),
            7
        );
        assert_eq!(
            tally.new_evictions(&[node("a", "x", 6), node("b", "x", 2)]),
            1
        );
        // b restarted: its 1 is new
        assert_eq!(
            tally.new_evictions(&[node("a", "x", 6), node("b", "x", 1)]),
            1
        );
    }

    #[test]
    fn only_noeviction_is_silent() {
        let nodes = [node("a", "noeviction", 0), node("b", "volatile-lru", 3)];
        let warnings = eviction_warnings(&nodes, "redis://x");
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("b has maxmemory-policy `volatile-lru`"));
    }
}

//! What Redis does when it is full. Every limit key has a TTL, so a server whose
//! `maxmemory-policy` evicts keys with one (`volatile-lru`, the default of many managed
//! services) or any key (`allkeys-*`) forgets counts under memory pressure: an attacker's quota
//! freed without a word. The gateway reads each server's policy and its `evicted_keys` from
//! `INFO` (which managed services allow where `CONFIG` is refused), to warn and to count.

use fred::interfaces::ClientLike;
use fred::types::InfoKind;

use super::fred_error::map_error;
use super::{Deadline, RedisStore};
use crate::store::StoreError;

/// One server's policy and evictions, as `INFO` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEviction {
    /// The cluster node (`host:port`), `None` for the one server of a standalone or sentinel
    /// store.
    pub node: Option<String>,
    /// `maxmemory_policy` (`INFO memory`).
    pub policy: String,
    /// `evicted_keys` (`INFO stats`): keys evicted since the server started.
    pub evicted_keys: u64,
}

impl NodeEviction {
    /// Whether the server may evict limit keys: any policy but `noeviction`.
    pub fn may_evict(&self) -> bool {
        self.policy != "noeviction"
    }
}

impl RedisStore {
    /// Every server's policy and evictions (in a cluster, each primary's), read under the
    /// admin deadline; a server that does not answer is left out.
    pub async fn eviction(&self) -> Result<Vec<NodeEviction>, StoreError> {
        let nodes = self.connection().nodes.every_node();
        let reads = nodes.into_iter().map(|n| async move {
            let deadline = Deadline::after(self.admin_timeout());
            deadline
                .run(async {
                    let memory: String = n
                        .client
                        .info(Some(InfoKind::Memory))
                        .await
                        .map_err(map_error)?;
                    let stats: String = n
                        .client
                        .info(Some(InfoKind::Stats))
                        .await
                        .map_err(map_error)?;
                    Ok::<_, StoreError>(NodeEviction {
                        node: n.server.as_ref().map(|s| s.to_string()),
                        policy: field(&memory, "maxmemory_policy").unwrap_or("").to_string(),
                        evicted_keys: field(&stats, "evicted_keys")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0),
                    })
                })
                .await
        });
        let read = futures_util::future::join_all(reads).await;
        let mut answered = Vec::new();
        let mut first_error = None;
        for r in read {
            match r {
                Ok(n) => answered.push(n),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match (answered.is_empty(), first_error) {
            (true, Some(e)) => Err(e),
            _ => Ok(answered),
        }
    }
}

/// The value of `name` in an `INFO` reply (`name:value` lines).
fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k == name).then_some(v.trim())
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn fields_are_read_from_info_lines() {
        let info = "# Memory\r\nused_memory:1\r\nmaxmemory_policy:volatile-lru\r\n";
        assert_eq!(super::field(info, "maxmemory_policy"), Some("volatile-lru"));
        assert_eq!(super::field(info, "evicted_keys"), None);
    }
}

//! Waiting for the store at start: the slot table (in a cluster), every worker's connection to
//! every node, and (for the gateway, not for `slidegate check`, which only reads) the decision
//! code loaded on each node that answers.

use std::time::Duration;

use super::{Deadline, RedisStore};
use crate::store::StoreError;

impl RedisStore {
    /// Waits up to `wait` for the slot table (in a cluster), every worker's connections (each
    /// at most half of it) and the script on every node that answers. A node that does not
    /// answer in time is reported; the others serve meanwhile, and it loads the script on its
    /// first call once back.
    pub async fn wait_until_ready(&self, wait: Duration) -> Result<(), StoreError> {
        let deadline = Deadline::after(wait);
        let ready = deadline.run(async {
            let all = self.inner.connections.all();
            all[0].nodes.refresh().await?;
            let connected = self.connect_nodes(wait / 2).await;
            let loaded = all[0].caller.load_code().await;
            connected.and(loaded)
        });
        // Boxed: the start's future is deep enough without this one's layers.
        Box::pin(ready).await
    }

    /// Waits up to `wait` for the slot table (in a cluster) and every worker's connections,
    /// loading nothing (`slidegate check` only reads).
    pub async fn wait_until_connected(&self, wait: Duration) -> Result<(), StoreError> {
        let deadline = Deadline::after(wait);
        let connected = deadline.run(async {
            self.inner.connections.all()[0].nodes.refresh().await?;
            self.connect_nodes(wait).await
        });
        // A node that refused the credentials says so even when the whole wait ran out first.
        Box::pin(connected)
            .await
            .map_err(|timeout| self.node_failure().unwrap_or(timeout))
    }

    /// Why some node's last try to connect failed, when one did and it is still not connected.
    pub(super) fn node_failure(&self) -> Option<StoreError> {
        let all = self.inner.connections.all();
        let mut nodes = all.iter().flat_map(|c| c.nodes.every_node());
        nodes.find_map(|n| n.failure())
    }

    /// Every worker's connection to every node, each within `each`; a node that does not
    /// connect in time reports why its last try failed (a refused password), when one did.
    async fn connect_nodes(&self, each: Duration) -> Result<(), StoreError> {
        let nodes = self
            .inner
            .connections
            .all()
            .iter()
            .flat_map(|c| c.nodes.every_node());
        let connected = futures_util::future::join_all(nodes.map(|n| async move {
            let connect = Deadline::after(each);
            connect
                .run(n.connected())
                .await
                .map_err(|timeout| n.failure().unwrap_or(timeout))
        }))
        .await;
        connected.into_iter().find(Result::is_err).unwrap_or(Ok(()))
    }
}

//! Operations besides decisions: an admin reset (delete a key's state), `PING` for `/readyz`, and
//! the pub/sub channel that carries resets to every instance's deny cache. Each runs under a
//! [`Deadline`] of its own: four times `store.timeout`, at least 200 ms.

use std::time::Duration;

use fred::interfaces::{ClientLike, EventInterface, KeysInterface, PubsubInterface};

use super::{map_error, Deadline, RedisStore};
use crate::store::{LimitSet, StoreError};

impl RedisStore {
    fn admin_deadline(&self) -> Deadline {
        Deadline::after((self.inner.timeout * 4).max(Duration::from_millis(200)))
    }

    /// Deletes every key of `base` for these limits, under both algorithms (a reload may have
    /// changed it), and its block marker. All share one hash tag, so one `DEL` does.
    pub async fn reset(&self, limits: &LimitSet, base: &str) -> Result<(), StoreError> {
        let mut keys = vec![crate::key::block_key(base), crate::key::counter_key(base)];
        for l in &limits.limits {
            keys.push(crate::key::sorted_set_key(base, &l.name));
        }
        self.admin_deadline()
            .run(async {
                let _: i64 = self.client().del(keys).await.map_err(map_error)?;
                Ok(())
            })
            .await
    }

    /// `PING`.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.admin_deadline()
            .run(async {
                let _: String = self.client().ping(None).await.map_err(map_error)?;
                Ok(())
            })
            .await
    }

    /// Tells every instance (through Redis pub/sub on `channel`) to forget `base` in its deny cache.
    pub async fn publish_reset(&self, channel: &str, base: &str) -> Result<(), StoreError> {
        self.admin_deadline()
            .run(async {
                let _: i64 = self
                    .client()
                    .publish(channel, base)
                    .await
                    .map_err(map_error)?;
                Ok(())
            })
            .await
    }

    /// Calls `on_reset(base)` for every reset published on `channel`, on a connection of its
    /// own that resubscribes after reconnects. The receiver fires once the subscription holds.
    pub fn subscribe_resets<F>(
        &self,
        channel: String,
        on_reset: F,
    ) -> Result<
        (
            tokio::task::JoinHandle<()>,
            tokio::sync::oneshot::Receiver<()>,
        ),
        StoreError,
    >
    where
        F: Fn(String) + Send + 'static,
    {
        let subscriber = self
            .inner
            .builder
            .build_subscriber_client()
            .map_err(|e| StoreError::Other(e.to_string()))?;
        let (subscribed_tx, subscribed_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut messages = subscriber.message_rx();
            subscriber.connect();
            let _resubscribe = subscriber.manage_subscriptions();
            loop {
                let subscribed = match subscriber.wait_for_connect().await {
                    Ok(()) => subscriber.subscribe(channel.as_str()).await,
                    Err(e) => Err(e),
                };
                match subscribed {
                    Ok(()) => break,
                    Err(e) => tracing::debug!(error = %e, "reset subscription failed; retrying"),
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let _ = subscribed_tx.send(());
            while let Ok(message) = messages.recv().await {
                if let Some(base) = message.value.as_string() {
                    on_reset(base);
                }
            }
        });
        Ok((task, subscribed_rx))
    }
}

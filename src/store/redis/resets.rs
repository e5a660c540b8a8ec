//! The subscription to admin resets (`DELETE /admin/usage` on any instance publishes the key's
//! base): a connection of its own, subscribed again after every reconnect. Redis keeps no
//! message for a subscriber that is away, so a reset published while the link was down, or
//! before it was subscribed again, never arrives: after each reconnect, once subscribed, the
//! follower is told that it may have missed some (`on_missed`), as it is when it fell behind
//! the messages.

use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::RedisStore;
use crate::store::StoreError;

/// How long a subscription that failed waits before it is tried again.
const RETRY: Duration = Duration::from_millis(200);

impl RedisStore {
    /// Calls `on_reset(base)` for every reset published on `channel`, and `on_missed()` once
    /// the subscription holds again after a reconnect (resets published meanwhile are lost) or
    /// after messages were dropped. The receiver fires once the first subscription holds.
    pub fn subscribe_resets<F, M>(
        &self,
        channel: String,
        on_reset: F,
        on_missed: M,
    ) -> Result<(JoinHandle<()>, oneshot::Receiver<()>), StoreError>
    where
        F: Fn(String) + Send + 'static,
        M: Fn() + Send + 'static,
    {
        let subscriber = (self.inner.subscriber)
            .build_subscriber_client()
            .map_err(|e| StoreError::Other(e.to_string()))?;
        let (subscribed_tx, subscribed_rx) = oneshot::channel();
        let task = tokio::spawn(async move {
            let mut messages = subscriber.message_rx();
            let mut reconnects = subscriber.reconnect_rx();
            subscriber.connect();
            subscribe(&subscriber, &channel).await;
            let _ = subscribed_tx.send(());
            loop {
                tokio::select! {
                    message = messages.recv() => match message {
                        Ok(message) => {
                            if let Some(base) = message.value.as_string() {
                                on_reset(base);
                            }
                        }
                        Err(RecvError::Lagged(_)) => on_missed(),
                        Err(RecvError::Closed) => break,
                    },
                    // (the first connection counts as one: subscribing again is a no-op,
                    // and the deny cache is still empty then)
                    reconnected = reconnects.recv() => {
                        if matches!(reconnected, Err(RecvError::Closed)) {
                            break;
                        }
                        subscribe(&subscriber, &channel).await;
                        on_missed();
                    }
                }
            }
        });
        Ok((task, subscribed_rx))
    }
}

/// Subscribes `subscriber` to `channel` once it is connected, trying again until it holds.
async fn subscribe(subscriber: &SubscriberClient, channel: &str) {
    loop {
        let subscribed = match subscriber.wait_for_connect().await {
            Ok(()) => subscriber.subscribe(channel).await,
            Err(e) => Err(e),
        };
        match subscribed {
            Ok(()) => return,
            Err(e) => tracing::debug!(error = %e, "reset subscription failed; retrying"),
        }
        tokio::time::sleep(RETRY).await;
    }
}

//! Admin resets from every instance: an instance on Redis follows the resets that any instance
//! publishes (`DELETE /admin/usage`) and drops the key from its own deny cache, so a reset
//! reaches every instance sharing the store within a second (README, "The traffic path"), a gateway's or an
//! embedded layer's alike.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::limiter::Limiter;
use crate::store::{Store, StoreError};

/// How long a follower waits for its subscription to hold while Redis answers: a reset
/// published before it holds would be missed.
const SUBSCRIBE_WAIT: Duration = Duration::from_secs(2);

/// A subscription to admin resets; it ends when dropped.
pub struct ResetFollower {
    task: JoinHandle<()>,
}

impl Drop for ResetFollower {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Limiter {
    /// With Redis, follows the resets published on `channel`, each dropping its key from this
    /// limiter's deny cache, and clears the deny cache whenever resets may have been missed
    /// (the subscription's link came back); `None` on the memory store (one instance, reset in
    /// place). Waits (bounded) for the subscription to hold when Redis answers; when it does
    /// not yet, serving comes first and the subscription holds once Redis is back.
    pub async fn follow_resets(
        self: &Arc<Self>,
        channel: String,
    ) -> Result<Option<ResetFollower>, StoreError> {
        let Store::Redis(redis) = self.store() else {
            return Ok(None);
        };
        let (reset, missed) = (Arc::downgrade(self), Arc::downgrade(self));
        let (task, subscribed) = redis.subscribe_resets(
            channel,
            move |base| {
                if let Some(limiter) = reset.upgrade() {
                    limiter.deny_cache().remove(&base);
                }
            },
            // A reset may have gone by unseen: every refusal held here is asked of the store
            // again, so none outlives a reset by more than the reconnect.
            move || {
                if let Some(limiter) = missed.upgrade() {
                    limiter.deny_cache().clear();
                }
            },
        )?;
        let wait = match redis.is_connected() {
            true => SUBSCRIBE_WAIT,
            false => Duration::ZERO,
        };
        if tokio::time::timeout(wait, subscribed).await.is_err() {
            tracing::warn!(
                "not yet subscribed to admin resets; they reach this instance once Redis answers"
            );
        }
        Ok(Some(ResetFollower { task }))
    }
}

//! Keeps each client's connection task running. fred's task ends for good on some errors (a
//! cluster redirection it could not follow, say), and a client whose task has ended reports
//! itself connected while its commands wait forever: every decision would then time out until a
//! restart. The keeper starts the task again, at most every [`RESTART_PAUSE`], for as long as
//! the store lives.

use std::time::Duration;

use fred::types::ConnectHandle;

/// The least time between two restarts of one client's connection task.
pub const RESTART_PAUSE: Duration = Duration::from_millis(100);

/// Watches `task`, a client's connection task, on the current runtime; whenever it ends,
/// `restart` starts it again, until `restart` answers `None` (the store is gone).
pub fn keep_connected(
    mut task: ConnectHandle,
    restart: impl Fn() -> Option<ConnectHandle> + Send + 'static,
) {
    tokio::spawn(async move {
        loop {
            let ended = (&mut task).await;
            tokio::time::sleep(RESTART_PAUSE).await;
            let Some(next) = restart() else {
                return;
            };
            match ended {
                Ok(Ok(())) => tracing::warn!("the Redis connection task ended; started it again"),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "the Redis connection task failed; started it again")
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the Redis connection task stopped; started it again")
                }
            }
            task = next;
        }
    });
}

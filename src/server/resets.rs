//! Rapid reset of accepted HTTP/2 streams (CVE-2023-44487). hyper bounds the streams a client
//! resets before the server accepts them; [`StreamResets`] counts the ones reset after: a stream
//! whose service future, or response body, is dropped before its end (hyper drops them when a
//! RST_STREAM arrives), against the streams the client let finish. A client that resets
//! [`RAPID_RESETS`] streams within [`RAPID_RESET_SPAN`] having let fewer than half of its streams
//! finish in that time gets GOAWAY, and its connection is closed.
//!
//! So a flood of resets costs its sender a new connection (a TCP and HTTP/2 handshake) every
//! hundred streams, while the gateway's cost per reset is a lock and a timestamp; a client whose
//! streams mostly finish is never cut, however many it cancels.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Resets of accepted streams within [`RAPID_RESET_SPAN`] that close a connection whose client
/// let fewer than as many streams finish meanwhile.
pub const RAPID_RESETS: usize = 100;
/// The span the resets are counted over.
pub const RAPID_RESET_SPAN: Duration = Duration::from_secs(10);

/// One HTTP/2 connection's stream ends: the latest resets and the streams finished.
#[derive(Default)]
pub struct StreamResets {
    /// Streams whose response reached its end, since the connection began.
    finished: AtomicU64,
    /// The latest [`RAPID_RESETS`] resets: when each came, and `finished` then.
    recent: Mutex<VecDeque<(Instant, u64)>>,
    /// The client crossed the line.
    tripped: AtomicBool,
    notify: Notify,
}

impl StreamResets {
    /// A stream's response reached its end.
    pub fn finished(&self) {
        self.finished.fetch_add(1, Ordering::Relaxed);
    }

    /// A stream ended before its response did (the client reset it).
    pub fn reset(&self) {
        let now = Instant::now();
        let finished = self.finished.load(Ordering::Relaxed);
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() == RAPID_RESETS {
            recent.pop_front();
        }
        recent.push_back((now, finished));
        let Some(&(oldest, finished_then)) = recent.front() else {
            return;
        };
        let rapid = recent.len() == RAPID_RESETS
            && now.duration_since(oldest) <= RAPID_RESET_SPAN
            && finished - finished_then < RAPID_RESETS as u64;
        drop(recent);
        if rapid && !self.tripped.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                resets = RAPID_RESETS,
                "closing an HTTP/2 connection that resets streams faster than it lets them finish"
            );
            self.notify.notify_one();
        }
    }

    /// Waits until the client has crossed the line.
    pub async fn tripped(&self) {
        while !self.tripped.load(Ordering::Acquire) {
            self.notify.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resets_trip_only_when_fewer_streams_finish_than_are_reset() {
        let polite = StreamResets::default();
        for _ in 0..RAPID_RESETS * 3 {
            polite.reset();
            polite.finished();
            polite.finished();
        }
        assert!(
            !polite.tripped.load(Ordering::Acquire),
            "most streams finished"
        );
        let rude = StreamResets::default();
        for _ in 0..RAPID_RESETS - 1 {
            rude.reset();
        }
        assert!(!rude.tripped.load(Ordering::Acquire), "below the count");
        rude.reset();
        assert!(rude.tripped.load(Ordering::Acquire), "the hundredth reset");
    }
}

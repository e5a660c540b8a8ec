//! Rapid reset of accepted HTTP/2 streams (CVE-2023-44487). hyper bounds the streams a client
//! resets before the server accepts them; [`StreamResets`] counts the ones reset after: a stream
//! whose service future, or response body, is dropped before its end (hyper drops them when a
//! RST_STREAM arrives), against the streams the client let finish, counted per second. A client
//! that resets [`RAPID_RESETS`] streams within [`RAPID_RESET_SPAN`] having let fewer than half of
//! its streams of that span finish (fewer than it reset) gets GOAWAY, and its connection is
//! closed.
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

/// Seconds of finished streams kept: the span, and the second under way.
const SECONDS_KEPT: usize = RAPID_RESET_SPAN.as_secs() as usize + 1;

/// One HTTP/2 connection's stream ends: the latest resets and the streams finished, per second.
pub struct StreamResets {
    /// When the connection began: the seconds below count from it.
    began: Instant,
    /// Streams whose response reached its end, per second of the connection, in a ring:
    /// `(second, finished in it)`.
    finished: [(AtomicU64, AtomicU64); SECONDS_KEPT],
    /// The latest [`RAPID_RESETS`] resets: when each came.
    recent: Mutex<VecDeque<Instant>>,
    /// The client crossed the line.
    tripped: AtomicBool,
    notify: Notify,
}

impl Default for StreamResets {
    fn default() -> StreamResets {
        StreamResets {
            began: Instant::now(),
            finished: std::array::from_fn(|_| (AtomicU64::new(0), AtomicU64::new(0))),
            recent: Mutex::new(VecDeque::with_capacity(RAPID_RESETS)),
            tripped: AtomicBool::new(false),
            notify: Notify::new(),
        }
    }
}

impl StreamResets {
    /// A stream's response reached its end.
    pub fn finished(&self) {
        let second = self.began.elapsed().as_secs();
        let (at, count) = &self.finished[second as usize % SECONDS_KEPT];
        // a second the ring comes back to starts from zero (two streams ending as it turns may
        // lose one count: the rule is a bound, not a ledger)
        if at.swap(second, Ordering::AcqRel) != second {
            count.store(0, Ordering::Release);
        }
        count.fetch_add(1, Ordering::AcqRel);
    }

    /// Streams finished within the last [`RAPID_RESET_SPAN`] (to the second).
    fn finished_lately(&self, now: Instant) -> u64 {
        let second = now.duration_since(self.began).as_secs();
        let oldest = second.saturating_sub(RAPID_RESET_SPAN.as_secs());
        (self.finished.iter())
            .filter(|(at, _)| (oldest..=second).contains(&at.load(Ordering::Acquire)))
            .map(|(_, count)| count.load(Ordering::Acquire))
            .sum()
    }

    /// A stream ended before its response did (the client reset it).
    pub fn reset(&self) {
        let now = Instant::now();
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() == RAPID_RESETS {
            recent.pop_front();
        }
        recent.push_back(now);
        let Some(&oldest) = recent.front() else {
            return;
        };
        // the last hundred resets within the span, and fewer streams let finish meanwhile than
        // were reset: fewer than half of its streams
        let rapid = recent.len() == RAPID_RESETS
            && now.duration_since(oldest) <= RAPID_RESET_SPAN
            && self.finished_lately(now) < RAPID_RESETS as u64;
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

    #[test]
    fn streams_finished_before_the_resets_count_too() {
        // a page's resources loaded, then the client navigates away and cancels the rest
        let browser = StreamResets::default();
        for _ in 0..RAPID_RESETS + 20 {
            browser.finished();
        }
        for _ in 0..RAPID_RESETS {
            browser.reset();
        }
        assert!(
            !browser.tripped.load(Ordering::Acquire),
            "more finished than reset"
        );
        // exactly half finished is not fewer than half
        let even = StreamResets::default();
        for _ in 0..RAPID_RESETS {
            even.finished();
            even.reset();
        }
        assert!(!even.tripped.load(Ordering::Acquire), "half, not fewer");
    }
}

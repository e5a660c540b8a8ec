//! Rapid reset of accepted HTTP/2 streams (CVE-2023-44487). hyper bounds the streams a client
//! resets before the server accepts them; [`StreamResets`] counts the ones reset after: a stream
//! whose service future, or response body, is dropped before its end (hyper drops them when a
//! RST_STREAM arrives), against the streams the client let finish, both counted per second. A
//! client that resets at least [`RAPID_RESETS`] streams within [`RAPID_RESET_SPAN`] having let
//! fewer than half of its streams of that span finish (fewer than it reset) gets GOAWAY, and its
//! connection is closed.
//!
//! So a flood of resets costs its sender a new connection (a TCP and HTTP/2 handshake) every
//! hundred streams, or as many as it let finish, while the gateway's cost per reset is a few
//! atomic operations; a client whose streams mostly finish is never cut, however many it
//! cancels.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Resets of accepted streams within [`RAPID_RESET_SPAN`] from which a connection whose client
/// let fewer streams finish than it reset in that span is closed.
pub const RAPID_RESETS: usize = 100;
/// The span the resets are counted over.
pub const RAPID_RESET_SPAN: Duration = Duration::from_secs(10);

/// Seconds of stream ends kept: the span, the second under way, and one more (finishes are
/// counted a second longer than resets: a stream that finished just before the one reset beside
/// it must not leave the span first).
const SECONDS_KEPT: usize = RAPID_RESET_SPAN.as_secs() as usize + 2;

/// Stream ends of one kind (finished, or reset) per second of a connection, in a ring of
/// `(second, count in it)`.
struct PerSecond([(AtomicU64, AtomicU64); SECONDS_KEPT]);

impl PerSecond {
    fn new() -> PerSecond {
        PerSecond(std::array::from_fn(|_| {
            (AtomicU64::new(0), AtomicU64::new(0))
        }))
    }

    /// Counts one in `second`. A second the ring comes back to starts from zero (two ends as it
    /// turns may lose one count: the rule is a bound, not a ledger).
    fn add(&self, second: u64) {
        let (at, count) = &self.0[second as usize % SECONDS_KEPT];
        if at.swap(second, Ordering::AcqRel) != second {
            count.store(0, Ordering::Release);
        }
        count.fetch_add(1, Ordering::AcqRel);
    }

    /// The count of the span up to `second` (to the second), and of `more` seconds before it.
    fn lately(&self, second: u64, more: u64) -> u64 {
        let oldest = second.saturating_sub(RAPID_RESET_SPAN.as_secs() + more);
        (self.0.iter())
            .filter(|(at, _)| (oldest..=second).contains(&at.load(Ordering::Acquire)))
            .map(|(_, count)| count.load(Ordering::Acquire))
            .sum()
    }
}

/// One HTTP/2 connection's stream ends: streams finished and streams reset, per second.
pub struct StreamResets {
    /// When the connection began: the seconds count from it.
    began: Instant,
    /// Streams whose response reached its end.
    finished: PerSecond,
    /// Streams reset before their response's end.
    resets: PerSecond,
    /// The client crossed the line.
    tripped: AtomicBool,
    notify: Notify,
}

impl Default for StreamResets {
    fn default() -> StreamResets {
        StreamResets {
            began: Instant::now(),
            finished: PerSecond::new(),
            resets: PerSecond::new(),
            tripped: AtomicBool::new(false),
            notify: Notify::new(),
        }
    }
}

impl StreamResets {
    /// A stream's response reached its end.
    pub fn finished(&self) {
        self.finished.add(self.began.elapsed().as_secs());
    }

    /// A stream ended before its response did (the client reset it).
    pub fn reset(&self) {
        self.reset_at(self.began.elapsed().as_secs());
    }

    /// A reset in `second` of the connection.
    fn reset_at(&self, second: u64) {
        self.resets.add(second);
        // at least a hundred resets within the span, and fewer streams let finish in it than
        // were reset: fewer than half of its streams
        let resets = self.resets.lately(second, 0);
        let rapid = resets >= RAPID_RESETS as u64 && self.finished.lately(second, 1) < resets;
        if rapid && !self.tripped.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                resets = RAPID_RESETS,
                "closing an HTTP/2 connection that resets streams faster than it lets them finish"
            );
            self.notify.notify_one();
        }
    }

    /// Whether the client has crossed the line.
    pub fn has_tripped(&self) -> bool {
        self.tripped.load(Ordering::Acquire)
    }

    /// Waits until the client has crossed the line.
    pub async fn tripped(&self) {
        while !self.has_tripped() {
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
        // finishes earlier in the span buy no flood: once the resets outnumber them, it trips
        let burst = StreamResets::default();
        for _ in 0..RAPID_RESETS + 10 {
            burst.finished();
        }
        for _ in 0..RAPID_RESETS + 10 {
            burst.reset();
        }
        assert!(
            !burst.tripped.load(Ordering::Acquire),
            "as many reset as finished"
        );
        burst.reset();
        assert!(
            burst.tripped.load(Ordering::Acquire),
            "one more reset than finished"
        );
    }

    #[test]
    fn finishes_a_second_before_their_resets_still_count() {
        // each second: ten streams finish, then, in the next second, ten are reset
        let balanced = StreamResets::default();
        for second in 0..40 {
            for _ in 0..10 {
                balanced.finished.add(second);
            }
            for _ in 0..10 {
                balanced.reset_at(second + 1);
            }
        }
        assert!(
            !balanced.tripped.load(Ordering::Acquire),
            "as many finished as reset"
        );
    }
}

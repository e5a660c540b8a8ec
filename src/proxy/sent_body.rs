//! A request body on its way upstream that reports how far it got: sent whole (which starts
//! the upstream's `timeout`) or failed while read from the client (the client's fault, a 400,
//! not the upstream's), when it last moved, and whether it waits for the client (else for the
//! upstream to take more), so a body that stops moving can be cut ([`BodyProgress::stalled`]).

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};

use crate::layer::BoxError as BodyError;

/// How far a request body has gone upstream.
pub struct BodyProgress {
    /// Its end has been polled: the upstream's `timeout` starts.
    pub sent: AtomicBool,
    /// Reading it from the client failed (malformed framing, the client gone).
    pub failed: AtomicBool,
    /// When it began.
    began: Instant,
    /// When a part of it last went on, in milliseconds from `began`.
    moved_ms: AtomicU64,
    /// Its last read found the client had sent nothing more yet.
    awaiting_client: AtomicBool,
}

/// Which side stopped a body that no longer moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stall {
    /// The client sends nothing more.
    Client,
    /// The upstream takes nothing more.
    Upstream,
}

impl Default for BodyProgress {
    fn default() -> BodyProgress {
        BodyProgress {
            sent: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            began: Instant::now(),
            moved_ms: AtomicU64::new(0),
            awaiting_client: AtomicBool::new(false),
        }
    }
}

impl BodyProgress {
    /// Whether the body has not moved for `limit` (and who holds it up), or how long it still
    /// has before it will have.
    pub fn stalled(&self, limit: Duration) -> Result<Stall, Duration> {
        let moved = self.began + Duration::from_millis(self.moved_ms.load(Ordering::Relaxed));
        match limit.checked_sub(moved.elapsed()) {
            Some(left) if !left.is_zero() => Err(left),
            _ if self.awaiting_client.load(Ordering::Relaxed) => Ok(Stall::Client),
            _ => Ok(Stall::Upstream),
        }
    }

    fn moved(&self) {
        let ms = self.began.elapsed().as_millis().min(u128::from(u64::MAX)) as u64;
        self.moved_ms.store(ms, Ordering::Relaxed);
    }
}

/// A request body that tells when it has been sent whole (its end polled), which starts the
/// upstream's `timeout`, and when reading it from the client failed.
pub struct SentBody<B> {
    /// The body itself.
    pub inner: B,
    /// `None` for a body that was empty from the start.
    pub sent: Option<Arc<BodyProgress>>,
}

impl<B> hyper::body::Body for SentBody<B>
where
    B: hyper::body::Body<Data = Bytes, Error = BodyError> + Unpin,
{
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Some(progress) = &this.sent {
            progress
                .awaiting_client
                .store(polled.is_pending(), Ordering::Relaxed);
        }
        let frame = std::task::ready!(polled);
        if let Some(progress) = &this.sent {
            progress.moved();
            match &frame {
                Some(Err(_)) => progress.failed.store(true, Ordering::Relaxed),
                None => progress.sent.store(true, Ordering::Relaxed),
                Some(Ok(_)) if this.inner.is_end_stream() => {
                    progress.sent.store(true, Ordering::Relaxed)
                }
                Some(Ok(_)) => {}
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

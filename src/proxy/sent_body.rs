//! A request body on its way upstream that reports how far it got: sent whole (which starts
//! the upstream's `timeout`) or failed while read from the client (the client's fault, a 400,
//! not the upstream's).

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};

use crate::layer::BoxError as BodyError;

/// How far a request body has gone upstream.
#[derive(Default)]
pub struct BodyProgress {
    /// Its end has been polled: the upstream's `timeout` starts.
    pub sent: AtomicBool,
    /// Reading it from the client failed (malformed framing, the client gone).
    pub failed: AtomicBool,
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
        let frame = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        if let Some(progress) = &this.sent {
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

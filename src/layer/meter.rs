//! [`MeteredBody`]: an answer's body on its way to the client, watched for what its attempt
//! still owes the store ([`Ending`]): each chunk is handed to the cost readers as it passes,
//! never held and never delayed, and the attempt is settled when the body ends. A body dropped
//! before its end (the client left) frees the attempt's slots at once, unless a cost may still
//! come: then it is read on to its end in a task of its own ([`read_on`]), within the
//! upstream's `timeout`, passing nothing on, and its slots are held until that end, since the
//! upstream is still answering: leaving early dodges neither what the answer states nor the
//! limit on answers in flight.
//!
//! Differences from a plain pass-through body: the inner body is boxed, so that it can move
//! into that task; only answers with something to settle at their end take this path.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::BodyExt;

use crate::limit::Ending;

/// The errors of a metered body (the layer's `BoxError`).
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An answer's body, boxed.
pub type BoxBody = UnsyncBoxBody<Bytes, BoxError>;

/// A body watched for its end, its chunks read for costs as they pass.
pub struct MeteredBody {
    body: BoxBody,
    ending: Option<Ending>,
}

impl MeteredBody {
    /// `body`, settling `ending` at its end.
    pub fn new(body: BoxBody, ending: Ending) -> MeteredBody {
        MeteredBody {
            body,
            ending: Some(ending),
        }
    }

    fn end(&mut self) {
        if let Some(ending) = self.ending.take() {
            ending.finish();
        }
    }
}

impl Body for MeteredBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let frame = std::task::ready!(Pin::new(&mut this.body).poll_frame(cx));
        match &frame {
            Some(Ok(f)) => {
                if let (Some(data), Some(ending)) = (f.data_ref(), this.ending.as_mut()) {
                    ending.feed(data);
                }
                if this.body.is_end_stream() {
                    this.end();
                }
            }
            // the body ended, or broke off: either way nothing more comes
            Some(Err(_)) | None => this.end(),
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for MeteredBody {
    fn drop(&mut self) {
        let Some(ending) = self.ending.take() else {
            return;
        };
        if self.body.is_end_stream() {
            // nothing left to send (a HEAD answer, a body hyper did not need to poll)
            ending.finish();
            return;
        }
        if !ending.reading() {
            // dropped unfinished: its slots are freed, its reservations kept
            return;
        }
        let body = std::mem::take(&mut self.body);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(read_on(body, ending));
        }
    }
}

/// Reads the rest of an answer whose client left, for the costs it states, within the
/// upstream's `timeout` (a reservation stays where none is stated by then); its slots are held
/// until then, since the upstream is still answering.
pub async fn read_on(mut body: BoxBody, mut ending: Ending) {
    let within = ending.read_within();
    let read = async {
        while ending.reading() {
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        ending.feed(data);
                    }
                }
                Some(Err(_)) | None => break,
            }
        }
    };
    let _ = tokio::time::timeout(within, read).await;
    ending.finish();
}

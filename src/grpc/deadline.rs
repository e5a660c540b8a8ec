//! A gRPC request must have fully arrived within `server.header_read_timeout`, as a request
//! head must on the traffic path: a client that opens a stream and never ends its message would
//! otherwise hold the call (and the decision behind it) for as long as the connection lives.
//! [`Deadline`] wraps the request body; past the deadline it fails, and the call ends with a
//! gRPC error status instead of waiting.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body::{Body, Frame, SizeHint};
use tokio::time::Sleep;
use tower::Service;

use crate::layer::BoxError;

/// The request body did not arrive in time.
#[derive(Debug, thiserror::Error)]
#[error("the gRPC request did not arrive whole within {0:?} (server.header_read_timeout)")]
pub struct TooSlow(Duration);

pin_project_lite::pin_project! {
    /// A request body that fails when it has not ended by its deadline.
    pub struct Deadline<B> {
        #[pin]
        body: B,
        #[pin]
        deadline: Sleep,
        timeout: Duration,
    }
}

impl<B: Body<Data = Bytes>> Body for Deadline<B>
where
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        match this.body.poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending => match this.deadline.poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(TooSlow(*this.timeout))))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A service whose requests' bodies must arrive within `timeout`.
#[derive(Clone)]
pub struct WithDeadline<S> {
    inner: S,
    timeout: Duration,
}

impl<S> WithDeadline<S> {
    /// `inner`, its request bodies bounded by `timeout`.
    pub fn new(inner: S, timeout: Duration) -> Self {
        WithDeadline { inner, timeout }
    }
}

impl<S, B> Service<Request<B>> for WithDeadline<S>
where
    S: Service<Request<Deadline<B>>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> S::Future {
        let timeout = self.timeout;
        self.inner.call(req.map(|body| Deadline {
            body,
            deadline: tokio::time::sleep(timeout),
            timeout,
        }))
    }
}

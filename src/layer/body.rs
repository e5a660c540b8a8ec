//! The bodies the layer passes on: a request body streamed as it came, or read whole (a route
//! whose keys read the body) and forwarded byte for byte; and a response body that is the inner
//! service's (watched for its end when its attempt settles there: [`MeteredBody`]), or the
//! layer's own answer (a 429, a problem body).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::meter::MeteredBody;

/// Errors of the bodies the layer passes on.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pin_project_lite::pin_project! {
    /// A request body as the inner service gets it (the variants' one field is the body).
    #[project = RequestBodyProj]
    #[allow(missing_docs)]
    pub enum RequestBody<B> {
        /// Streamed from the client, unread.
        Stream { #[pin] body: B },
        /// Read whole for key parts; sent on as it came.
        Buffered { bytes: Option<Bytes> },
    }
}

impl<B> RequestBody<B> {
    /// The client's body, unread.
    pub fn stream(body: B) -> Self {
        RequestBody::Stream { body }
    }

    /// A body read whole.
    pub fn buffered(bytes: Bytes) -> Self {
        RequestBody::Buffered {
            bytes: (!bytes.is_empty()).then_some(bytes),
        }
    }
}

impl<B> Body for RequestBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.project() {
            RequestBodyProj::Stream { body } => body.poll_frame(cx).map_err(Into::into),
            RequestBodyProj::Buffered { bytes } => {
                Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Stream { body } => body.is_end_stream(),
            RequestBody::Buffered { bytes } => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestBody::Stream { body } => body.size_hint(),
            RequestBody::Buffered { bytes } => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// A response body: the inner service's, or the layer's own answer (the variants' one
    /// field is the body).
    #[project = ResponseBodyProj]
    #[allow(missing_docs)]
    pub enum ResponseBody<B> {
        /// The inner service's answer.
        Inner { #[pin] body: B },
        /// The inner service's answer, its attempt settled at its end.
        Metered { #[pin] body: MeteredBody },
        /// The layer's own answer, or the inner service's boxed while its headers waited for
        /// the count a reset left (`attempt::Recounting`).
        Own { #[pin] body: axum::body::Body },
    }
}

impl<B> ResponseBody<B> {
    /// The inner service's body.
    pub fn inner(body: B) -> Self {
        ResponseBody::Inner { body }
    }

    /// The layer's own body (or a boxed one: see [`ResponseBody::Own`]).
    pub fn own(body: axum::body::Body) -> Self {
        ResponseBody::Own { body }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.project() {
            ResponseBodyProj::Inner { body } => body.poll_frame(cx).map_err(Into::into),
            ResponseBodyProj::Metered { body } => body.poll_frame(cx),
            ResponseBodyProj::Own { body } => body.poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Inner { body } => body.is_end_stream(),
            ResponseBody::Metered { body } => body.is_end_stream(),
            ResponseBody::Own { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Inner { body } => body.size_hint(),
            ResponseBody::Metered { body } => body.size_hint(),
            ResponseBody::Own { body } => body.size_hint(),
        }
    }
}

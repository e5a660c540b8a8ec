//! Reading a request body whole for `json:` / `form:` key parts: only on routes whose keys use
//! them, at most `max_key_body_bytes` (413 beyond: padding must not dodge a limit), unencoded
//! (415 for a `Content-Encoding` other than `identity`), and within `header_read_timeout` (408:
//! a slow body must not hold a slot). What is read goes upstream byte for byte.
//!
//! `Expect: 100-continue` is the gateway's to answer on such a route: hyper sends the client
//! `100 Continue` when the body is first read, and the upstream, which then gets the whole body
//! at once, is not sent the `Expect` (it would answer a question already answered).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{CONTENT_ENCODING, CONTENT_LENGTH, EXPECT};
use http::HeaderMap;
use http_body::Body;
use tokio::time::Sleep;

use super::body::BoxError;
use crate::error::GatewayError;

/// Before reading a body whole: refuses what can be refused from the head (an encoded body, a
/// length over the bound), and takes `Expect` off the head, since the gateway answers it.
pub fn start_reading(headers: &mut HeaderMap, max: usize) -> Result<(), GatewayError> {
    // Every line counts: `identity` on the first and `gzip` on the second is a gzip body.
    for encoding in headers.get_all(CONTENT_ENCODING) {
        let text = String::from_utf8_lossy(encoding.as_bytes());
        if !text
            .split(',')
            .all(|e| e.trim().eq_ignore_ascii_case("identity"))
        {
            return Err(GatewayError::UnsupportedBodyEncoding {
                encoding: text.into_owned(),
            });
        }
    }
    if announced_length(headers).is_some_and(|n| n > max as u64) {
        return Err(GatewayError::BodyTooLarge { max });
    }
    headers.remove(EXPECT);
    Ok(())
}

/// The body's length as the request's `Content-Length` announces it, when that is one number.
pub fn announced_length(headers: &HeaderMap) -> Option<u64> {
    let value = headers.get(CONTENT_LENGTH)?.to_str().ok()?;
    value.trim().parse().ok()
}

/// A body being read whole, with its bound and its deadline.
pub struct Reading<B> {
    body: Pin<Box<B>>,
    buf: BytesMut,
    max: usize,
    timeout: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl<B> Reading<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    /// Starts reading `body`: at most `max` bytes, all of it within `timeout`.
    pub fn new(body: B, max: usize, timeout: Duration) -> Self {
        Reading {
            body: Box::pin(body),
            buf: BytesMut::new(),
            max,
            timeout,
            deadline: Box::pin(tokio::time::sleep(timeout)),
        }
    }

    /// Ready with the whole body, or why it cannot be read.
    pub fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<Result<Bytes, GatewayError>> {
        loop {
            match self.body.as_mut().poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        if self.buf.len() + data.len() > self.max {
                            return Poll::Ready(Err(GatewayError::BodyTooLarge { max: self.max }));
                        }
                        self.buf.extend_from_slice(&data);
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    let e: BoxError = e.into();
                    return Poll::Ready(Err(GatewayError::of_body(&*e)));
                }
                Poll::Ready(None) => {
                    return Poll::Ready(Ok(std::mem::take(&mut self.buf).freeze()));
                }
                Poll::Pending => {
                    if self.deadline.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Err(GatewayError::BodyTimeout {
                            timeout_ms: self.timeout.as_millis(),
                        }));
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

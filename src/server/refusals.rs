//! hyper answers a request it cannot parse (a malformed head: 400; a target too long: 414; a head
//! beyond its buffer: 431) by itself, with an empty body, before the gateway sees the request.
//! [`Refusals`] wraps a connection's socket and replaces such an answer, as hyper writes it, with
//! the gateway's problem response (`crate::error::refusal_bytes`; a 414 becomes the 431 of any
//! head beyond the bound; a `HEAD` request's without its body), so every error a client gets
//! has the same shape and a request id.
//!
//! How it tells them apart: it looks only at writes that start a message while no request of
//! ours is being answered ([`Activity::between_messages`]: after a response has been written
//! and flushed whole, before the next request reaches the service), so bytes of a response body
//! are never looked into, whatever they look like; there, an error head (`HTTP/1.x 4` or `5`)
//! without `x-request-id`, which every answer of the gateway carries, can only be hyper's own.
//! It also tells the connection's [`Activity`] when bytes arrive and when writes are flushed.

use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::activity::Activity;

/// A socket whose writes are watched for hyper's own refusals.
pub struct Refusals<S> {
    inner: S,
    activity: Arc<Activity>,
    /// The replacement still to be written, and how much of it is out.
    replacement: Option<(Vec<u8>, usize)>,
    /// The bytes of the next request's head began to arrive since the last message.
    head_began: bool,
    /// That head is a `HEAD` request's, whose answer has no body.
    head_request: bool,
}

impl<S> Refusals<S> {
    /// Wraps `inner`, reporting to `activity`.
    pub fn new(inner: S, activity: Arc<Activity>) -> Self {
        Refusals {
            inner,
            activity,
            replacement: None,
            head_began: false,
            head_request: false,
        }
    }

    /// Notes the method of a request whose head begins in `bytes`, just read: between
    /// messages, the first bytes read are the next head's (a pipelined request read while
    /// another was answered is not seen, and is answered with a body).
    fn note_read(&mut self, bytes: &[u8]) {
        if !self.activity.between_messages() {
            self.head_began = false;
        } else if !std::mem::replace(&mut self.head_began, true) {
            self.head_request = bytes.starts_with(b"HEAD ");
        }
    }

    /// Hyper's own refusal, if `bytes` start one where one can be.
    fn refusal(&self, bytes: &[u8]) -> Option<StatusCode> {
        if !self.activity.between_messages() {
            return None;
        }
        own_refusal(bytes)
    }
}

/// The status of an error head hyper wrote itself, if `bytes` starts one.
fn own_refusal(bytes: &[u8]) -> Option<StatusCode> {
    let status = bytes
        .strip_prefix(b"HTTP/1.1 ")
        .or_else(|| bytes.strip_prefix(b"HTTP/1.0 "))?;
    if !matches!(status.first(), Some(b'4' | b'5')) || status.len() < 3 {
        return None;
    }
    // One pass over the head's lines (a 429 from the deny cache comes through here, so no
    // search at every byte): the first empty line ends the head.
    let ours = bytes
        .split(|&b| b == b'\n')
        .skip(1)
        .take_while(|line| !line.is_empty() && *line != b"\r")
        .any(|line| {
            line.get(..b"x-request-id:".len())
                .is_some_and(|name| name.eq_ignore_ascii_case(b"x-request-id:"))
        });
    if ours {
        return None;
    }
    StatusCode::from_bytes(&status[..3]).ok()
}

impl<S: AsyncWrite + Unpin> Refusals<S> {
    /// Writes what is left of a replacement; ready once it is all out.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while let Some((bytes, written)) = &mut self.replacement {
            if *written == bytes.len() {
                self.replacement = None;
                break;
            }
            let n =
                std::task::ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        Poll::Ready(Ok(()))
    }

    /// Takes hyper's `len` bytes in place of the refusal they start, queueing the replacement.
    fn replace(
        &mut self,
        cx: &mut Context<'_>,
        status: StatusCode,
        len: usize,
    ) -> Poll<std::io::Result<usize>> {
        let answer = crate::error::refusal_bytes(status, self.head_request);
        self.replacement = Some((answer, 0));
        match self.drain(cx) {
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            // The rest goes out on the next write, flush or shutdown.
            _ => Poll::Ready(Ok(len)),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Refusals<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.read();
            this.note_read(&buf.filled()[before..]);
        }
        read
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Refusals<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if this.replacement.is_some() {
            // Whatever hyper writes after its refusal is dropped with it.
            std::task::ready!(this.drain(cx))?;
            return Poll::Ready(Ok(buf.len()));
        }
        if let Some(status) = this.refusal(buf) {
            return this.replace(cx, status, buf.len());
        }
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.activity.wrote(written.is_pending());
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let total = bufs.iter().map(|b| b.len()).sum();
        if this.replacement.is_some() {
            std::task::ready!(this.drain(cx))?;
            return Poll::Ready(Ok(total));
        }
        if let Some(status) = bufs.first().and_then(|b| this.refusal(b)) {
            return this.replace(cx, status, total);
        }
        let written = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.activity.wrote(written.is_pending());
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.drain(cx))?;
        let flushed = Pin::new(&mut this.inner).poll_flush(cx);
        if matches!(flushed, Poll::Ready(Ok(()))) {
            this.activity.flushed();
        }
        flushed
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_heads_without_a_request_id_are_hypers_own() {
        let hyper_400 = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        assert_eq!(own_refusal(hyper_400), Some(StatusCode::BAD_REQUEST));
        let hyper_431 = b"HTTP/1.1 431 Request Header Fields Too Large\r\n\r\n";
        assert_eq!(
            own_refusal(hyper_431),
            Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        );
        let ours =
            b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\nx-request-id: ab\r\n\r\n{}";
        assert_eq!(own_refusal(ours), None);
        let upstream_404 = b"HTTP/1.1 404 Not Found\r\nx-request-id: ab\r\n\r\n";
        assert_eq!(own_refusal(upstream_404), None);
        assert_eq!(own_refusal(b"HTTP/1.1 200 OK\r\n\r\n"), None);
        assert_eq!(own_refusal(b"HTTP/1.1 100 Continue\r\n\r\n"), None);
        assert_eq!(own_refusal(b"{\"json\": 1}"), None);
    }
}

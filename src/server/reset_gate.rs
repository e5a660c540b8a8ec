//! An HTTP/2 connection's socket that stops reading once its client crossed the rapid-reset line
//! ([`StreamResets`]). hyper's GOAWAY on shutdown first names the highest stream id and keeps
//! accepting streams until the client answers its PING, a client that ignores it included; with
//! the socket no longer read, no frame sent after the line is seen, so no new stream is accepted,
//! decided or charged while the connection is told GOAWAY and then cut. Writes go on: what is in
//! flight is answered until the cut.

use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::resets::StreamResets;

/// A socket read only until `resets` trips.
pub struct ResetGate<S> {
    inner: S,
    resets: Arc<StreamResets>,
}

impl<S> ResetGate<S> {
    /// Wraps `inner`, reading it while `resets` has not tripped.
    pub fn new(inner: S, resets: Arc<StreamResets>) -> Self {
        ResetGate { inner, resets }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ResetGate<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.resets.has_tripped() {
            // Nothing more is read: the watchdog's cut ends the connection.
            return Poll::Pending;
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ResetGate<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

//! One client connection: its protocol told from the first bytes, served by hyper with the
//! gateway's service, and watched ([`Activity`]) so that a slow request head, an idle
//! keep-alive connection and an HTTP/2 connection with no open stream are closed in time, and
//! the drain closes it gracefully. An HTTP/2 connection whose client resets its accepted streams
//! faster than it lets them finish ([`StreamResets`]) gets GOAWAY, is read no more
//! ([`ResetGate`]) and is closed.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tower::Service;

use super::activity::Activity;
use super::refusals::Refusals;
use super::reset_gate::ResetGate;
use super::resets::StreamResets;
use super::watchdog::{watch, Bounds};
use crate::config::ServerConfig;
use crate::layer::BoxError;

/// hyper's builders for both protocols, configured once per listener.
#[derive(Clone)]
pub struct Builders {
    http1: hyper::server::conn::http1::Builder,
    http2: hyper::server::conn::http2::Builder<TokioExecutor>,
    bounds: Bounds,
}

/// Most streams one HTTP/2 connection may have open at once.
pub const MAX_CONCURRENT_STREAMS: u32 = 128;
/// Streams a client may reset before the server has accepted them; beyond, the connection is
/// closed (rapid-reset protection; resets of accepted streams: [`StreamResets`]).
pub const MAX_PENDING_RESETS: usize = 20;

impl Builders {
    /// The builders for `settings`.
    pub fn new(settings: &ServerConfig) -> Builders {
        let mut http1 = hyper::server::conn::http1::Builder::new();
        http1
            .timer(TokioTimer::new())
            // The watchdog times request heads (hyper's own timer would also cut idle
            // keep-alive connections at the head timeout).
            .header_read_timeout(None)
            // hyper's own bounds sit above the gateway's, which answer 431 with a problem body;
            // beyond them hyper refuses by itself (re-written as a problem body too).
            .max_headers(settings.max_headers * 2 + 16)
            .max_buf_size((settings.max_header_bytes * 2).max(16 * 1024));
        let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
            .max_pending_accept_reset_streams(MAX_PENDING_RESETS)
            .max_local_error_reset_streams(1024)
            .max_header_list_size(settings.max_header_bytes as u32 * 2)
            .keep_alive_interval(Duration::from_secs(20))
            .keep_alive_timeout(Duration::from_secs(20));
        Builders {
            http1,
            http2,
            bounds: Bounds {
                header_read_timeout: settings.header_read_timeout,
                idle_timeout: settings.idle_timeout,
            },
        }
    }
}

/// The protocol a connection speaks.
enum Protocol {
    Http1,
    Http2,
}

/// What a connection can serve: the gateway's service, or the admin listener's router.
pub trait Served:
    Service<Request<Incoming>, Response = Response<Self::Body>, Error = Infallible>
    + Clone
    + Send
    + 'static
{
    /// The response body.
    type Body: http_body::Body<Data = bytes::Bytes, Error: Into<BoxError>> + Send + 'static;
}

impl<S, B> Served for S
where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = bytes::Bytes, Error: Into<BoxError>> + Send + 'static,
{
    type Body = B;
}

/// Serves one connection until it ends, is cut, or the drain closes it.
pub async fn run<S: Served>(
    stream: TcpStream,
    service: S,
    builders: Builders,
    mut stopping: watch::Receiver<bool>,
) where
    S::Future: Send + 'static,
{
    let protocol = tokio::select! {
        protocol = sniff(&stream, builders.bounds.header_read_timeout) => protocol,
        // A connection that has sent nothing when the drain starts has no request to finish
        // (a client's spare pooled connection): the drain does not wait for it.
        _ = stopping.wait_for(|stop| *stop) => None,
    };
    let Some(protocol) = protocol else { return };
    // The first bytes are in (they told the protocol): the first head is on its way.
    let activity = Arc::new(Activity::new(true));
    let served = match protocol {
        Protocol::Http1 => {
            let service = Tracked {
                inner: service,
                activity: activity.clone(),
                resets: None,
            };
            let io = TokioIo::new(Refusals::new(stream, activity.clone()));
            let conn = builders.http1.serve_connection(io, service);
            let shut_down =
                |c: Pin<&mut _>| hyper::server::conn::http1::Connection::graceful_shutdown(c);
            watch(conn, shut_down, &activity, None, builders.bounds, stopping).await
        }
        Protocol::Http2 => {
            let resets = Arc::new(StreamResets::default());
            let service = Tracked {
                inner: service,
                activity: activity.clone(),
                resets: Some(resets.clone()),
            };
            let io = TokioIo::new(ResetGate::new(stream, resets.clone()));
            let conn = builders.http2.serve_connection(io, service);
            let shut_down =
                |c: Pin<&mut _>| hyper::server::conn::http2::Connection::graceful_shutdown(c);
            watch(
                conn,
                shut_down,
                &activity,
                Some(&resets),
                builders.bounds,
                stopping,
            )
            .await
        }
    };
    if let Err(e) = served {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// Tells h2 (prior knowledge: it starts with the `PRI * HTTP/2.0` preface) from HTTP/1 by the
/// first bytes, waiting for them at most `within`; `None` when none came or the client left.
async fn sniff(stream: &TcpStream, within: Duration) -> Option<Protocol> {
    const PREFACE: &[u8] = b"PRI ";
    let look = async {
        let mut first = [0u8; 4];
        loop {
            let n = stream.peek(&mut first).await.ok()?;
            if n == 0 {
                return None;
            }
            if !PREFACE.starts_with(&first[..n]) {
                return Some(Protocol::Http1);
            }
            if n == PREFACE.len() {
                return Some(Protocol::Http2);
            }
            // A preface cut short: the rest is on its way.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(within, look).await.ok().flatten()
}

/// A connection's service, telling the connection's [`Activity`] when a request begins and
/// when its response body ends, and (HTTP/2) its [`StreamResets`] how each stream ended.
#[derive(Clone)]
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
    resets: Option<Arc<StreamResets>>,
}

impl<S: Served> hyper::service::Service<Request<Incoming>> for Tracked<S> {
    type Response = Response<TrackedBody<S::Body>>;
    type Error = Infallible;
    type Future = TrackedFuture<S::Future>;

    fn call(&self, req: Request<Incoming>) -> TrackedFuture<S::Future> {
        self.activity.begin();
        // Both services are always ready, and cloning one clones a few `Arc`s.
        let mut inner = self.inner.clone();
        TrackedFuture {
            inner: inner.call(req),
            end: Some(End {
                activity: self.activity.clone(),
                resets: self.resets.clone(),
                finished: false,
            }),
        }
    }
}

/// Ends the request's activity when dropped (with its response body, or unanswered), and tells
/// the stream resets whether the response reached its end (`finished`) or the stream was reset.
struct End {
    activity: Arc<Activity>,
    resets: Option<Arc<StreamResets>>,
    finished: bool,
}

impl Drop for End {
    fn drop(&mut self) {
        self.activity.end();
        match (&self.resets, self.finished) {
            (Some(resets), true) => resets.finished(),
            (Some(resets), false) => resets.reset(),
            (None, _) => {}
        }
    }
}

pin_project_lite::pin_project! {
    /// The service's future, handing its [`End`] to the response body.
    struct TrackedFuture<F> {
        #[pin]
        inner: F,
        end: Option<End>,
    }
}

impl<F, B> Future for TrackedFuture<F>
where
    F: Future<Output = Result<Response<B>, Infallible>>,
    B: http_body::Body,
{
    type Output = Result<Response<TrackedBody<B>>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = std::task::ready!(this.inner.poll(cx))?;
        let mut end = this.end.take();
        if let Some(end) = &mut end {
            // An empty body is sent with the head: hyper never polls it.
            end.finished = response.body().is_end_stream();
        }
        Poll::Ready(Ok(response.map(|inner| TrackedBody { inner, end })))
    }
}

pin_project_lite::pin_project! {
    /// A response body whose drop ends its request's activity.
    struct TrackedBody<B> {
        #[pin]
        inner: B,
        end: Option<End>,
    }
}

impl<B> http_body::Body for TrackedBody<B>
where
    B: http_body::Body<Data = bytes::Bytes, Error: Into<BoxError>>,
{
    type Data = bytes::Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        let mut this = self.project();
        let frame = std::task::ready!(this.inner.as_mut().poll_frame(cx));
        if frame.is_none() || this.inner.is_end_stream() {
            if let Some(end) = this.end {
                end.finished = true;
            }
        }
        Poll::Ready(frame.map(|f| f.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

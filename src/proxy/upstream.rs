//! One upstream: how to reach it, its keep-alive connections, and forwarding one request.
//!
//! Differences from a pooled client that runs each connection in a task of its own (the usual
//! `hyper-util` client): the task that serves the downstream connection drives the upstream
//! connection itself. While the request is in flight it polls the upstream connection next to
//! the response future; once the head is back, the response body polls it while the client reads
//! ([`DrivenBody`]), and when the body ends the connection goes back to the idle list. So a
//! request costs no hop to another task and back, no wake-up of another thread, and the idle list
//! is touched twice per request. Idle connections are polled by nobody, nor when taken: a
//! connection the upstream closed meanwhile is noticed by the first poll after a request was
//! handed to it, which reads the close before it writes, and the request, not written, is sent
//! again on another connection. The body's small chunks that are ready together go on to the
//! client as one ([`JoinedBody`]).
//!
//! Bodies are streamed both ways. Only the response head is bounded by the upstream's `timeout`,
//! counted from the moment the request body has been sent ([`SentBody`]; the bound is the
//! exchange's, `exchange.rs`): neither a long upload nor a long download is cut. Connects are
//! retried within `connect_timeout` ([`RetryConnect`]).

use std::future::{poll_fn, Future};
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use http::header::HOST;
use http::uri::{PathAndQuery, Scheme};
use http::{HeaderValue, Request, Response, Uri, Version};
use hyper::body::{Body as _, Frame, Incoming, SizeHint};
use hyper::client::conn::http1;
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower::ServiceExt;

use super::connect::RetryConnect;
use super::headers::{remove_hop_by_hop, set_forwarded};
use super::joined_body::JoinedBody;
use super::sent_body::{BodyProgress, SentBody};
use crate::config::UpstreamConfig;
use crate::error::{error_chain, GatewayError};
use crate::layer::{Attempt, RequestBody};
use crate::peer::Peer;
use crate::request_id::{RequestId, X_REQUEST_ID};
use crate::workers::PerWorker;

/// Idle connections kept per upstream.
const MAX_IDLE: usize = 512;
/// An idle connection older than this is closed rather than reused.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

type Io = MaybeHttpsStream<TokioIo<TcpStream>>;

/// The body the upstream gets: the client's, watched for its end.
type OutBody = SentBody<RequestBody<Incoming>>;

/// One keep-alive connection: the handle that sends and the state machine that does the I/O.
/// It is kilobytes large (hyper's buffers and dispatch state), so it lives in a box
/// ([`BoxedConn`]): a request's futures and its response body hold and move a pointer, not a
/// copy of it.
struct Conn {
    sender: http1::SendRequest<OutBody>,
    driver: http1::Connection<Io, OutBody>,
    idle_since: Instant,
}

type BoxedConn = Box<Conn>;

impl Conn {
    /// Polls the connection once: `false` when it has ended (closed by the upstream, or failed).
    fn drive(&mut self, cx: &mut Context<'_>) -> bool {
        Pin::new(&mut self.driver).poll(cx).is_pending()
    }

    /// Whether the connection can take the next request: still open (one poll reads a close
    /// the upstream sent meanwhile; nobody waits on it, so no waker is kept) and ready. Asked
    /// when a response ends and its connection was not ready yet ([`DrivenBody::release`]).
    fn reusable(&mut self) -> bool {
        let alive = self.drive(&mut Context::from_waker(std::task::Waker::noop()));
        alive && self.sender.is_ready()
    }
}

/// A configured upstream with its idle connections.
pub struct Upstream {
    /// The config it was built from (reused across reloads while unchanged).
    pub config: UpstreamConfig,
    host: HeaderValue,
    base_path: String,
    /// `scheme://authority`, what the connector is asked for.
    address: Uri,
    connector: RetryConnect<HttpsConnector<HttpConnector>>,
    /// Idle connections, per worker: a connection's I/O is registered with the runtime that
    /// opened it, so it is only ever used on that worker.
    idle: Arc<PerWorker<Mutex<Vec<BoxedConn>>>>,
}

impl Upstream {
    /// Builds the upstream; connections open when first needed and are kept alive.
    pub fn new(config: &UpstreamConfig) -> Upstream {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(config.connect_timeout));
        http.set_keepalive(Some(Duration::from_secs(60)));
        let tls = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
            .expect("ring provider supports the default TLS versions")
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let scheme = config.url.scheme().cloned().unwrap_or(Scheme::HTTP);
        let authority = config
            .url
            .authority()
            .cloned()
            .expect("validated upstream URL has a host");
        let host = HeaderValue::from_str(authority.as_str())
            .expect("an authority is a valid header value");
        let address = Uri::builder()
            .scheme(scheme)
            .authority(authority)
            .path_and_query("/")
            .build()
            .expect("scheme and authority make a URI");
        Upstream {
            config: config.clone(),
            host,
            base_path: config.url.path().trim_end_matches('/').to_string(),
            address,
            connector: RetryConnect::new(tls, config.connect_timeout),
            idle: Arc::new(PerWorker::new(|_| Mutex::new(Vec::new()))),
        }
    }

    /// Rewrites `req` for the upstream (see `prepare`) and starts sending it: the future
    /// returns the response head with its body still streaming. The future holds the request
    /// once, in place, and no timer: the proxy's exchange (`exchange.rs`) bounds it by the
    /// upstream's `timeout`, counted from when the returned `BodyProgress` says the body has
    /// been sent (`None`: a request without a body, sent with its head).
    pub fn forward(
        self: &Arc<Self>,
        mut req: Request<RequestBody<Incoming>>,
        peer: &Peer,
        client: IpAddr,
        request_id: &RequestId,
        attempt: Attempt,
    ) -> (
        impl Future<Output = Result<Response<Body>, BoxError>> + Send + 'static,
        Option<Arc<BodyProgress>>,
    ) {
        self.prepare(&mut req, peer, client, request_id);
        // A request without a body is sent with its head: nothing to watch.
        let sent = (!req.body().is_end_stream()).then(|| Arc::new(BodyProgress::default()));
        let req = req.map(|inner| SentBody {
            inner,
            sent: sent.clone(),
        });
        (self.clone().send(req, attempt), sent)
    }

    /// What a failed exchange answers: the client's body broke off or was malformed (bad chunk
    /// framing), its fault; else the upstream could not be reached or failed the request.
    pub(super) fn failed(&self, e: BoxError, progress: Option<&BodyProgress>) -> GatewayError {
        if progress.is_some_and(|p| p.failed.load(Ordering::Relaxed)) {
            return GatewayError::of_body(&*e);
        }
        tracing::warn!(upstream = %self.config.name, error = %error_chain(&*e), "upstream request failed");
        GatewayError::UpstreamConnect {
            upstream: self.config.name.clone(),
        }
    }

    /// No response head within the upstream's `timeout`.
    pub(super) fn timed_out(&self) -> GatewayError {
        GatewayError::UpstreamTimeout {
            upstream: self.config.name.clone(),
            timeout_ms: self.config.timeout.as_millis(),
        }
    }

    /// Rewrites the request for the upstream: origin-form target under the base path, HTTP/1.1,
    /// no hop-by-hop headers, `X-Forwarded-*`, `Host`, `X-Request-Id`.
    fn prepare(
        &self,
        req: &mut Request<RequestBody<Incoming>>,
        peer: &Peer,
        client: IpAddr,
        id: &RequestId,
    ) {
        // The host the client asked for: an absolute-form target's (or HTTP/2's :authority),
        // which RFC 9112 3.2.2 puts before `Host`, else `Host`.
        let original_host = req
            .uri()
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
            .or_else(|| req.headers().get(HOST).cloned());
        *req.uri_mut() = self.origin_form(req.uri());
        *req.version_mut() = Version::HTTP_11;
        let headers = req.headers_mut();
        remove_hop_by_hop(headers);
        set_forwarded(headers, peer, client, original_host);
        headers.insert(HOST, self.host.clone());
        headers.insert(X_REQUEST_ID.clone(), id.header_value().clone());
    }

    /// Sends on an idle connection (or a new one) and drives it until the response head is in.
    /// The request counts as seen by the upstream ([`Attempt::sent`]) from the moment it is
    /// handed to a connection, whose next poll writes its head; a connection found closed by
    /// that poll hands it back unwritten, unseen ([`Attempt::unsent`]). The request waits in the
    /// future's own slot (`request`), which a retry refills: moved into a local, it would be
    /// stored twice.
    fn send(
        self: Arc<Self>,
        request: Request<OutBody>,
        attempt: Attempt,
    ) -> impl Future<Output = Result<Response<Body>, BoxError>> + Send + 'static {
        let mut request = Some(request);
        async move {
            let mut fresh = false;
            loop {
                let mut conn = match self.take_idle() {
                    Some(conn) => conn,
                    None => {
                        fresh = true;
                        // Boxed: a connect's future holds the connection's I/O by value (a TLS
                        // session included), and inline it would size, and be moved with,
                        // every request's future, though most requests take an idle connection.
                        Box::pin(self.connect()).await?
                    }
                };
                attempt.sent();
                let req = request.take().expect("a request waits to be sent");
                let mut sent = std::pin::pin!(conn.sender.try_send_request(req));
                let mut conn = Some(conn);
                let result = poll_fn(|cx| {
                    // The connection does the I/O; the response future waits for its head. One
                    // that ended is dropped at once: ended before writing the request (a close
                    // read first), it hands the request back.
                    if conn.as_mut().is_some_and(|c| !c.drive(cx)) {
                        conn = None;
                    }
                    sent.as_mut().poll(cx)
                })
                .await;
                let mut e = match result {
                    Ok(response) => return Ok(self.stream_back(response, conn)),
                    Err(e) => e,
                };
                match e.take_message() {
                    // Closed before the request was written: not seen, and safe to send again,
                    // on the next idle connection or, once, on a new one.
                    Some(message) => {
                        attempt.unsent();
                        if fresh {
                            return Err(e.into_error().into());
                        }
                        request = Some(message);
                    }
                    None => return Err(e.into_error().into()),
                }
            }
        }
    }

    /// The response with a body that drives `conn` (if it has not ended) and returns it to the
    /// idle list at its end.
    fn stream_back(&self, response: Response<Incoming>, conn: Option<BoxedConn>) -> Response<Body> {
        let (mut parts, body) = response.into_parts();
        remove_hop_by_hop(&mut parts.headers);
        let mut driven = DrivenBody {
            inner: body,
            conn,
            idle: self.idle.clone(),
        };
        if driven.inner.is_end_stream() {
            // Nothing to stream (204, 304, HEAD, an empty body): the connection is free now.
            driven.release();
        }
        Response::from_parts(parts, Body::new(JoinedBody::new(driven)))
    }

    /// The most recently used idle connection that is still open.
    fn take_idle(&self) -> Option<BoxedConn> {
        loop {
            let conn = self
                .idle
                .get()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop();
            let conn = conn?;
            // Not polled: `send`'s first poll reads a close before it writes.
            if conn.idle_since.elapsed() <= IDLE_TIMEOUT && conn.sender.is_ready() {
                return Some(conn);
            }
        }
    }

    async fn connect(&self) -> Result<BoxedConn, BoxError> {
        let io = self.connector.clone().oneshot(self.address.clone()).await?;
        let (sender, driver) = http1::handshake(io).await?;
        Ok(Box::new(Conn {
            sender,
            driver,
            idle_since: Instant::now(),
        }))
    }

    fn origin_form(&self, uri: &Uri) -> Uri {
        let pq = uri.path_and_query().map_or("/", PathAndQuery::as_str);
        if self.base_path.is_empty() {
            if let Some(pq) = uri.path_and_query() {
                return Uri::from(pq.clone());
            }
        }
        format!("{}{}", self.base_path, pq)
            .parse()
            .unwrap_or_else(|_| Uri::from_static("/"))
    }
}

/// What a failed exchange gives before [`Upstream::failed`] names it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The upstream's response body, which drives its connection while the client reads it and
/// gives the connection back when it ends (a body dropped early closes the connection).
struct DrivenBody {
    inner: Incoming,
    conn: Option<BoxedConn>,
    idle: Arc<PerWorker<Mutex<Vec<BoxedConn>>>>,
}

impl DrivenBody {
    /// Gives the connection back to the idle list, if it can take the next request. It is
    /// polled again only when not ready yet: the poll that delivered the response's end also
    /// took the connection back to idle and made it ask for the next request (hyper's client
    /// asks only from an idle connection, after the whole response), so a ready connection
    /// needs no second poll to be known open.
    fn release(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        if conn.sender.is_ready() || conn.reusable() {
            conn.idle_since = Instant::now();
            let mut idle = self.idle.get().lock().unwrap_or_else(|e| e.into_inner());
            if idle.len() < MAX_IDLE {
                idle.push(conn);
            }
        }
    }
}

impl hyper::body::Body for DrivenBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        if let Some(conn) = &mut this.conn {
            if !conn.drive(cx) {
                // Ended: whatever it read is already in the body; no reuse.
                this.conn = None;
            }
        }
        let frame = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        if frame.is_none() || this.inner.is_end_stream() {
            this.release();
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

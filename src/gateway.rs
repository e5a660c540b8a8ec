//! The gateway's request path: the rate-limit layer ([`crate::layer`]) in front of the proxy
//! ([`ProxyService`]), wrapped by what only the gateway does around it: the request id (kept
//! from a trusted peer, else generated, returned on every answer) and the access log line. A
//! request whose client left before its answer is logged too, with status 499 (NGINX's "client
//! closed request"), once the layer knows what became of it (the upstream's answer, read after
//! the client left, is on the line).
//!
//! ```text
//! GatewayService (request id, access log) -> RateLimit (route, keys, limits) -> ProxyService
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use arc_swap::ArcSwap;
use axum::body::Body;
use futures_util::future::Either;
use http::{Method, Request, Response};
use hyper::body::Incoming;
use tower::Service;

use crate::access_log::{self, Answered};
use crate::error::{GatewayError, CLIENT_CLOSED_REQUEST};
use crate::key::{chain_header, is_trusted};
use crate::layer::{Arrival, Decided, Departed, RateLimit, ResponseBody, Shared};
use crate::peer::Peer;
use crate::proxy::{ProxyService, UpstreamOutcome, Upstreams};
use crate::request_id::{RequestId, X_REQUEST_ID};

/// The whole request path of one gateway: the layer's shared state and the upstreams.
#[derive(Clone)]
pub struct Gateway {
    shared: Arc<Shared>,
    proxy: ProxyService,
}

impl Gateway {
    /// A gateway limiting with `shared` and forwarding to the upstreams in force.
    pub fn new(shared: Arc<Shared>, upstreams: Arc<ArcSwap<Upstreams>>) -> Gateway {
        Gateway {
            shared,
            proxy: ProxyService::new(upstreams),
        }
    }

    /// The service for one connection from `peer`.
    pub fn service(&self, peer: IpAddr) -> GatewayService {
        let untrusted = Peer::new(peer);
        let header = self.shared.table.load().config.server.client_ip_header;
        let trusted = Peer {
            vouched_in: Some(chain_header(header)),
            ..untrusted.clone()
        };
        GatewayService {
            inner: RateLimit::new(self.proxy.clone(), self.shared.clone()),
            peer: [Arc::new(untrusted), Arc::new(trusted)],
            shared: self.shared.clone(),
        }
    }
}

/// The request path for one connection.
#[derive(Clone)]
pub struct GatewayService {
    inner: RateLimit<ProxyService>,
    /// The peer, as one untrusted and one trusted (whether it is trusted is decided per
    /// request: a reload may change the list; the trusted one is made again when a reload
    /// changes the header trusted proxies write).
    peer: [Arc<Peer>; 2],
    shared: Arc<Shared>,
}

impl Service<Request<Incoming>> for GatewayService {
    type Response = Response<ResponseBody<Body>>;
    type Error = Infallible;
    type Future = GatewayFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<Incoming>) -> GatewayFuture {
        let started = Instant::now();
        let ip = self.peer[0].ip;
        let (trusted, header) = {
            let table = self.shared.table.load();
            let server = &table.config.server;
            let trusted = is_trusted(ip, &server.trusted_proxies);
            (trusted, chain_header(server.client_ip_header))
        };
        if trusted && self.peer[1].vouched_in != Some(header) {
            // a reload changed the header trusted proxies write
            let peer = Peer {
                vouched_in: Some(header),
                ..(*self.peer[0]).clone()
            };
            self.peer[1] = Arc::new(peer);
        }
        let request_id = RequestId::for_request(req.headers(), trusted);
        let req_is_head = req.method() == Method::HEAD;
        let log = access_log::enabled().then(|| Logged {
            method: req.method().clone(),
            uri: req.uri().clone(),
        });
        let future = match crate::route::check_host(&req) {
            Ok(()) => {
                // the id and the client's address for the layer, the forwarding facts for the
                // proxy
                req.extensions_mut().insert(Arrival {
                    request_id: request_id.clone(),
                    peer: self.peer[usize::from(trusted)].clone(),
                });
                Either::Left(self.inner.call(req))
            }
            Err(e) => {
                let refused = GatewayError::from(e).into_response(&request_id);
                Either::Right(std::future::ready(Ok(refused.map(ResponseBody::own))))
            }
        };
        GatewayFuture {
            head: req_is_head,
            future,
            request_id,
            log,
            started,
        }
    }
}

/// A request answered before the layer (a `Host` that RFC 9112 refuses).
type Refused = std::future::Ready<Result<Response<ResponseBody<Body>>, Infallible>>;

/// What the access log needs of the request itself.
struct Logged {
    method: Method,
    /// The target as the client sent it (a clone shares its bytes).
    uri: http::Uri,
}

pin_project_lite::pin_project! {
    /// A request through the gateway: the layer's future, then the request id on the answer
    /// and the access log line.
    pub struct GatewayFuture {
        #[pin]
        future: Either<crate::layer::ResponseFuture<ProxyService, Incoming>, Refused>,
        // a `HEAD` request: its answer goes without a body
        head: bool,
        request_id: RequestId,
        log: Option<Logged>,
        started: Instant,
    }

    impl PinnedDrop for GatewayFuture {
        fn drop(this: Pin<&mut Self>) {
            // Still to log: the client left before the answer.
            let this = this.project();
            let Some(log) = this.log.take() else { return };
            let (request_id, started) = (this.request_id.clone(), *this.started);
            let then = Box::new(move |departed: Departed| {
                let upstream = departed
                    .answer
                    .as_ref()
                    .and_then(|a| a.extensions.get::<UpstreamOutcome>());
                let answered = Answered {
                    status: CLIENT_CLOSED_REQUEST,
                    decided: Some(departed.decided.for_log()),
                    upstream: upstream.map(|u| u.for_log()),
                };
                answered.write(&log.method, log.uri.path(), &request_id, started.elapsed());
            });
            match this.future.as_pin_mut() {
                Either::Left(layer) => layer.client_left(Some(then)),
                Either::Right(_) => then(Departed { decided: Decided::default(), answer: None }),
            }
        }
    }
}

impl Future for GatewayFuture {
    type Output = Result<Response<ResponseBody<Body>>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = std::task::ready!(this.future.poll(cx))?;
        if *this.head {
            response = without_body(response);
        }
        response
            .headers_mut()
            .insert(X_REQUEST_ID.clone(), this.request_id.header_value().clone());
        if let Some(log) = this.log.take() {
            let mut answered = crate::layer::answered(&response);
            let upstream = response.extensions().get::<UpstreamOutcome>();
            answered.upstream = upstream.map(|u| u.for_log());
            answered.write(
                &log.method,
                log.uri.path(),
                this.request_id,
                this.started.elapsed(),
            );
        }
        Poll::Ready(Ok(response))
    }
}

/// The answer to a `HEAD` request, its body dropped (its headers, `Content-Length` included,
/// say what a `GET` would get). hyper drops it over HTTP/1.1 but sends it over HTTP/2, where a
/// body on a `HEAD` answer is a protocol error: the client would see no status at all. An
/// answer whose end settles its attempt keeps its (empty) body, to be settled as it ends.
fn without_body(response: Response<ResponseBody<Body>>) -> Response<ResponseBody<Body>> {
    response.map(|body| match body {
        metered @ ResponseBody::Metered { .. } => metered,
        _ => ResponseBody::own(Body::empty()),
    })
}

//! The outermost step of the request path, as a tower layer: it assigns the request id, refuses
//! what must not go further (an unsafe path, a head over the bounds, conflicting framing), finds
//! the route, and hands the later steps what they need as request extensions: the limiter its
//! [`Limited`] (policy and client IP), the proxy its [`Target`] (upstream and peer). On the way
//! back it returns `X-Request-Id` and writes the access log line.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use arc_swap::ArcSwap;
use axum::body::Body;
use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{Request, Response};
use hyper::body::Incoming;
use tower::{Layer, Service};

use super::{normalize_uri, RouteTable};
use crate::access_log::{self, AccessEntry};
use crate::error::GatewayError;
use crate::key::{client_ip, is_trusted};
use crate::limit::{Limited, Verdicts};
use crate::proxy::Target;
use crate::request_id::{RequestId, X_REQUEST_ID};

/// The TCP peer of a request, inserted by the server for each connection.
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub SocketAddr);

/// Wraps a service (the rate limiter) in [`Router`].
#[derive(Clone)]
pub struct RouteLayer {
    table: Arc<ArcSwap<RouteTable>>,
}

impl RouteLayer {
    /// A layer routing with the table in force in `table` (swapped on reload).
    pub fn new(table: Arc<ArcSwap<RouteTable>>) -> Self {
        RouteLayer { table }
    }
}

impl<S> Layer<S> for RouteLayer {
    type Service = Router<S>;

    fn layer(&self, inner: S) -> Router<S> {
        Router {
            inner,
            table: self.table.clone(),
        }
    }
}

/// The routing service; see [`RouteLayer`].
#[derive(Clone)]
pub struct Router<S> {
    inner: S,
    table: Arc<ArcSwap<RouteTable>>,
}

impl<S> Service<Request<Incoming>> for Router<S>
where
    S: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let table = self.table.load_full();
        Box::pin(async move { Ok(handle(table, inner, req).await) })
    }
}

async fn handle<S>(
    table: Arc<RouteTable>,
    mut inner: S,
    mut req: Request<Incoming>,
) -> Response<Body>
where
    S: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>,
{
    let started = Instant::now();
    let peer = req
        .extensions()
        .get::<PeerAddr>()
        .map_or(SocketAddr::from(([0, 0, 0, 0], 0)), |p| p.0);
    let server = &table.config.server;
    let peer_trusted = is_trusted(peer.ip(), &server.trusted_proxies);
    let request_id = RequestId::for_request(req.headers(), peer_trusted);
    let method = req.method().clone();
    let raw_path = req.uri().path().to_string();

    let routed = admit(&table, &mut req).cloned();
    let (mut response, route) = match routed {
        Err(e) => (e.into_response(&request_id), None),
        Ok(route) => {
            let client_ip = client_ip(peer.ip(), req.headers(), &server.trusted_proxies);
            let extensions = req.extensions_mut();
            extensions.insert(request_id.clone());
            extensions.insert(Limited {
                policy: route.policy.clone(),
                client_ip,
            });
            extensions.insert(Target {
                upstream: route.upstream.clone(),
                metrics: route.metrics.clone(),
                peer,
                peer_trusted,
                request_id: request_id.clone(),
            });
            let response = match inner.call(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            (response, Some(route))
        }
    };
    response
        .headers_mut()
        .insert(X_REQUEST_ID.clone(), request_id.header_value().clone());
    if route.as_ref().is_none_or(|r| r.config.access_log) {
        let verdicts = response.extensions_mut().remove::<Verdicts>();
        access_log::write(&AccessEntry {
            request_id: &request_id,
            route: route.as_ref().map(|r| r.config.name.as_str()),
            method: method.as_str(),
            path: &raw_path,
            status: response.status().as_u16(),
            verdicts: verdicts.as_ref(),
            sample: route.as_ref().map_or(1.0, |r| r.config.access_log_sample),
            upstream: response.extensions().get::<crate::proxy::UpstreamOutcome>(),
            duration: started.elapsed(),
        });
    }
    response
}

/// The checks before routing, then the route: the head within bounds, no conflicting framing,
/// a path with one safe spelling (which replaces the one sent).
fn admit<'t>(
    table: &'t RouteTable,
    req: &mut Request<Incoming>,
) -> Result<&'t Arc<super::Route>, GatewayError> {
    let server = &table.config.server;
    let headers = req.headers();
    if headers.len() > server.max_headers {
        return Err(GatewayError::HeadTooLarge {
            what: format!("{} header fields", headers.len()),
            max: format!("{}", server.max_headers),
        });
    }
    let head_bytes: usize = req.uri().path_and_query().map_or(1, |p| p.as_str().len())
        + headers
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + 4)
            .sum::<usize>();
    if head_bytes > server.max_header_bytes {
        return Err(GatewayError::HeadTooLarge {
            what: format!("{head_bytes} bytes"),
            max: format!("{} bytes", server.max_header_bytes),
        });
    }
    if headers.contains_key(TRANSFER_ENCODING) && headers.contains_key(CONTENT_LENGTH) {
        return Err(GatewayError::ConflictingFraming);
    }
    normalize_uri(req.uri_mut())?;
    table
        .find(req.method(), req.uri().path())
        .ok_or_else(|| GatewayError::NoRoute {
            method: req.method().to_string(),
            path: req.uri().path().to_string(),
        })
}

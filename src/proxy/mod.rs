//! The forwarding half of the gateway: the innermost tower service, which sends an allowed
//! request to its upstream and streams the answer back. Upstream refused -> 502, no response
//! head in time -> 504 (see `crate::error`). It learns where to send a request from the
//! [`Target`] extension the route step put on it, and knows nothing of routes or limits.

mod connect;
pub mod headers;
mod upstream;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use http::{Request, Response};
use hyper::body::Incoming;
use tower::Service;

pub use upstream::Upstream;

use crate::metrics::RouteMetrics;
use crate::request_id::RequestId;

/// Where an allowed request goes, and who sent it (request extension).
#[derive(Clone)]
pub struct Target {
    /// The route's upstream.
    pub upstream: Arc<Upstream>,
    /// The route's metric handles (upstream status and duration).
    pub metrics: Arc<RouteMetrics>,
    /// The TCP peer.
    pub peer: SocketAddr,
    /// Whether the peer is a trusted proxy.
    pub peer_trusted: bool,
    /// Forwarded as `X-Request-Id`.
    pub request_id: RequestId,
}

/// What the upstream answered, for the access log (response extension).
#[derive(Debug, Clone, Copy)]
pub struct UpstreamOutcome {
    /// Its status; `None` when it could not be reached or timed out.
    pub status: Option<u16>,
    /// Time until its response head.
    pub duration: Duration,
}

/// Sends requests to the upstream named in their [`Target`] extension.
#[derive(Clone, Copy, Default)]
pub struct Proxy;

impl Service<Request<Incoming>> for Proxy {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<Incoming>) -> Self::Future {
        Box::pin(async move {
            let Some(target) = req.extensions_mut().remove::<Target>() else {
                let id = RequestId::generate();
                return Ok(crate::error::problem(
                    http::StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "the request reached the proxy without a route",
                    &id,
                ));
            };
            Ok(forward(target, req).await)
        })
    }
}

async fn forward(target: Target, req: Request<Incoming>) -> Response<Body> {
    let started = Instant::now();
    let result = target
        .upstream
        .forward(
            req,
            target.peer.ip(),
            target.peer_trusted,
            &target.request_id,
        )
        .await;
    let duration = started.elapsed();
    target
        .metrics
        .upstream_duration
        .observe(duration.as_secs_f64());
    let (mut response, status) = match result {
        Ok(response) => {
            let status = response.status().as_u16();
            (response.map(Body::new), Some(status))
        }
        Err(e) => (e.into_response(&target.request_id), None),
    };
    target.metrics.upstream(status);
    response
        .extensions_mut()
        .insert(UpstreamOutcome { status, duration });
    response
}

//! The forwarding half of the gateway: the innermost tower service, which sends an allowed
//! request to its route's upstream and streams the answer back. Upstream refused -> 502,
//! no response head in time -> 504 (see `crate::error`).

mod client;
pub mod headers;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use http::{Request, Response};
use hyper::body::Incoming;
use tower::Service;

pub use client::Upstream;

use crate::runtime::CompiledRoute;

/// What the rate-limit layer hands the proxy with each allowed request (request extension).
#[derive(Clone)]
pub struct Forward {
    /// The matched route, with its upstream and metrics.
    pub route: Arc<CompiledRoute>,
    /// The TCP peer.
    pub peer: SocketAddr,
    /// Whether the peer is a trusted proxy.
    pub peer_trusted: bool,
}

/// Sends requests to the upstream named in their [`Forward`] extension.
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
            let Some(fwd) = req.extensions_mut().remove::<Forward>() else {
                return Ok(crate::error::json_error(
                    http::StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "request reached the proxy without a route",
                ));
            };
            Ok(forward(fwd, req).await)
        })
    }
}

async fn forward(fwd: Forward, req: Request<Incoming>) -> Response<Body> {
    let metrics = &fwd.route.metrics;
    let started = Instant::now();
    let result = fwd
        .route
        .upstream
        .forward(req, fwd.peer.ip(), fwd.peer_trusted)
        .await;
    metrics
        .upstream_duration
        .observe(started.elapsed().as_secs_f64());
    match result {
        Ok(response) => {
            metrics.upstream(Some(response.status().as_u16()));
            response.map(Body::new)
        }
        Err(e) => {
            metrics.upstream(None);
            e.into_response()
        }
    }
}

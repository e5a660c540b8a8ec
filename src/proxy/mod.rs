//! The forwarding half of the gateway: sends an allowed request to its upstream and streams the
//! answer back ([`forward`]). Upstream refused -> 502, no response head in time -> 504 (see
//! `crate::error`). It knows nothing of routes or limits: it is handed the upstream, the route's
//! metric handles and who sent the request.

mod connect;
pub mod headers;
mod upstream;

use std::time::{Duration, Instant};

use axum::body::Body;
use http::{Request, Response};
use hyper::body::Incoming;

pub use headers::Peer;
pub use upstream::Upstream;

use crate::metrics::RouteMetrics;
use crate::request_id::RequestId;

/// What the upstream answered, for the access log.
#[derive(Debug, Clone, Copy)]
pub struct UpstreamOutcome {
    /// Its status; `None` when it could not be reached or timed out.
    pub status: Option<u16>,
    /// Time until its response head.
    pub duration: Duration,
}

/// Sends `req` from `peer` to `upstream`, counting the answer in the route's `metrics`. An
/// upstream that cannot be reached or does not answer in time gets the gateway's 502 or 504.
pub async fn forward(
    upstream: &Upstream,
    metrics: &RouteMetrics,
    req: Request<Incoming>,
    peer: &Peer,
    request_id: &RequestId,
) -> (Response<Body>, UpstreamOutcome) {
    let started = Instant::now();
    let result = upstream.forward(req, peer, request_id).await;
    let duration = started.elapsed();
    metrics.upstream_duration.observe(duration.as_secs_f64());
    let (response, status) = match result {
        Ok(response) => {
            let status = response.status().as_u16();
            (response, Some(status))
        }
        Err(e) => (e.into_response(request_id), None),
    };
    metrics.upstream(status);
    (response, UpstreamOutcome { status, duration })
}

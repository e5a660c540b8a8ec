//! The forwarding half of the gateway: [`ProxyService`], the service the rate-limit layer wraps,
//! sends an allowed request to its route's upstream and streams the answer back. Upstream
//! refused -> 502, no response head in time -> 504 (see `crate::error`). It knows nothing of
//! limits: the layer hands it the matched route and the client IP in the request's extensions,
//! and an [`Attempt`] it tells when the request goes out and what the upstream answered. When
//! the client leaves after the request went out, the layer keeps polling this service's future
//! (in a task of its own), so the upstream's answer is still read within its `timeout` and
//! counted in the upstream metrics.

mod connect;
pub mod headers;
mod joined_body;
mod sent_body;
mod upstream;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use axum::body::Body;
use http::{Request, Response};
use hyper::body::Incoming;

pub use upstream::Upstream;

use crate::config::{Config, UpstreamConfig};
use crate::error::GatewayError;
use crate::layer::{Attempt, MatchedRoute, RequestBody};
use crate::peer::Peer;
use crate::request_id::RequestId;

/// What the upstream answered, for the access log (response extension).
#[derive(Debug, Clone, Copy)]
pub struct UpstreamOutcome {
    /// Its status; `None` when it could not be reached or timed out.
    pub status: Option<u16>,
    /// Time until its response head.
    pub duration: Duration,
}

impl UpstreamOutcome {
    /// What the access log shows of it.
    pub fn for_log(self) -> crate::access_log::Upstream {
        crate::access_log::Upstream {
            status: self.status,
            duration: self.duration,
        }
    }
}

/// The upstreams of one config, by name; a reload keeps the pool of an upstream whose settings
/// did not change.
#[derive(Default)]
pub struct Upstreams {
    by_name: BTreeMap<String, Arc<Upstream>>,
}

impl Upstreams {
    /// The upstreams of `config`, reusing `previous`'s where unchanged.
    pub fn build(config: &Config, previous: &Upstreams) -> Upstreams {
        let by_name = config
            .upstreams
            .iter()
            .map(|(name, c)| {
                let upstream = match previous.by_name.get(name) {
                    Some(u) if u.config == **c => u.clone(),
                    _ => Arc::new(Upstream::new(c)),
                };
                (name.clone(), upstream)
            })
            .collect();
        Upstreams { by_name }
    }

    fn get(&self, name: &str) -> Option<&Arc<Upstream>> {
        self.by_name.get(name)
    }

    /// The config of upstream `name`.
    pub fn config(&self, name: &str) -> Option<&UpstreamConfig> {
        self.get(name).map(|u| &u.config)
    }
}

/// Sends each request to its route's upstream.
#[derive(Clone)]
pub struct ProxyService {
    upstreams: Arc<ArcSwap<Upstreams>>,
}

impl ProxyService {
    /// A proxy over the upstreams in force in `upstreams` (swapped on reload).
    pub fn new(upstreams: Arc<ArcSwap<Upstreams>>) -> ProxyService {
        ProxyService { upstreams }
    }
}

impl tower::Service<Request<RequestBody<Incoming>>> for ProxyService {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<RequestBody<Incoming>>) -> Self::Future {
        let extensions = req.extensions();
        let matched = extensions.get::<MatchedRoute>().cloned();
        let peer = extensions.get::<Arc<Peer>>().cloned();
        // Told when the request goes out and what the upstream answered, so that the layer can
        // settle an attempt whose client leaves (see `crate::layer::Attempt`).
        let attempt = extensions.get::<Attempt>().cloned().unwrap_or_default();
        attempt.track();
        let request_id = extensions
            .get::<RequestId>()
            .cloned()
            .unwrap_or_else(RequestId::generate);
        let upstreams = self.upstreams.load();
        let upstream = matched.as_ref().and_then(|m| {
            let name = m.route.config.upstream.as_deref()?;
            upstreams.get(name).cloned()
        });
        drop(upstreams);
        Box::pin(async move {
            let (Some(matched), Some(upstream), Some(peer)) = (matched, upstream, peer) else {
                let error = GatewayError::UpstreamConnect {
                    upstream: "(none)".into(),
                };
                return Ok(error.into_response(&request_id));
            };
            let started = Instant::now();
            let result = upstream
                .forward(req, &peer, matched.client_ip, &request_id, &attempt)
                .await;
            let duration = started.elapsed();
            let metrics = &matched.route.metrics;
            metrics.upstream_duration.observe(duration.as_secs_f64());
            let (mut response, status) = match result {
                Ok(response) => {
                    let status = response.status().as_u16();
                    attempt.answered(status);
                    metrics.upstream(Some(status));
                    (response, Some(status))
                }
                // The client's body failed: the upstream neither answered nor failed.
                Err(e @ GatewayError::BodyUnreadable(_)) => (e.into_response(&request_id), None),
                Err(e) => {
                    metrics.upstream(None);
                    (e.into_response(&request_id), None)
                }
            };
            response
                .extensions_mut()
                .insert(UpstreamOutcome { status, duration });
            Ok(response)
        })
    }
}

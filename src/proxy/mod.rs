//! The forwarding half of the gateway: [`ProxyService`], the service the rate-limit layer wraps,
//! sends an allowed request to its route's upstream and streams the answer back. Upstream
//! refused -> 502, no response head in time -> 504 (see `crate::error`). It knows nothing of
//! limits: the layer hands it the matched route and the client IP in the request's extensions,
//! and an [`Attempt`] it tells when the request goes out and what the upstream answered. When
//! the client leaves after the request went out, the layer keeps polling this service's future
//! (in a task of its own), so the upstream's answer is still read within its `timeout` and
//! counted in the upstream metrics.

mod connect;
mod exchange;
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

use arc_swap::ArcSwap;
use axum::body::Body;
use http::{Request, Response};
use hyper::body::Incoming;

use exchange::Exchange;
pub use exchange::UpstreamOutcome;
pub use upstream::Upstream;

use crate::config::{Config, UpstreamConfig};
use crate::error::GatewayError;
use crate::layer::{request_id, Arrival, Attempt, MatchedRoute, RequestBody};

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
        let peer = extensions.get::<Arrival>().map(|a| a.peer.clone());
        // Told when the request goes out and what the upstream answered, so that the layer can
        // settle an attempt whose client leaves (see `crate::layer::Attempt`).
        let attempt = extensions.get::<Attempt>().cloned().unwrap_or_default();
        attempt.track();
        let request_id = request_id(extensions);
        let upstreams = self.upstreams.load();
        let upstream = matched.as_ref().and_then(|m| {
            let name = m.route.config.upstream.as_deref()?;
            upstreams.get(name).cloned()
        });
        drop(upstreams);
        let (Some(matched), Some(upstream), Some(peer)) = (matched, upstream, peer) else {
            let error = GatewayError::UpstreamConnect {
                upstream: "(none)".into(),
            };
            return Box::pin(std::future::ready(Ok(error.into_response(&request_id))));
        };
        let (send, progress) =
            upstream.forward(req, &peer, matched.client_ip, &request_id, attempt.clone());
        let metrics = matched.route.metrics.clone();
        let exchange = Exchange::new(send, progress, upstream, metrics, attempt, request_id);
        // Boxed in one of the allocator's small blocks, served from its fast path: checked in
        // debug builds, which every proxied request of the tests runs through.
        debug_assert!(
            std::mem::size_of_val(&exchange) <= crate::allocator::SMALL_BLOCK,
            "a request's exchange takes {} bytes",
            std::mem::size_of_val(&exchange)
        );
        Box::pin(exchange)
    }
}

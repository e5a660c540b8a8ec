//! Asking the layer about a request that a proxy in front will forward itself (forward auth,
//! Envoy's ext_authz): the request goes through the same route, keys and limits as on the
//! traffic path, in front of a service that only says yes ([`Allow`]), so the answer is the
//! traffic path's own (its 429, problem body and headers) without a proxy behind it.
//!
//! Every route takes such requests (a route without `upstream` serves the proxy in front only);
//! one no route takes is allowed, uncounted: the proxy asks about every request. A limit that
//! counts outcomes counts every attempt admitted here, since the answer is never seen.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response};
use tower::Service;

use super::body::{BoxError, RequestBody};
use super::extensions::OutcomeUnseen;
use super::future::ResponseFuture;
use super::service::RateLimit;
use super::shared::{ForwardingWarning, Shared, Unmatched};

/// The layer, asked on behalf of a proxy in front.
#[derive(Clone)]
pub struct Asker {
    limit: RateLimit<Allow>,
    shared: Arc<Shared>,
}

impl Asker {
    /// Asks with the route table and limiter of `gateway` (the traffic path's).
    pub fn new(gateway: &Shared) -> Asker {
        let shared = Arc::new(Shared {
            table: gateway.table.clone(),
            limiter: gateway.limiter.clone(),
            unmatched: Unmatched::PassThrough,
            resets: None,
            forwarding_warned: ForwardingWarning::default(),
            inner_is_upstream: false,
        });
        Asker {
            limit: RateLimit::new(Allow, shared.clone()),
            shared,
        }
    }

    /// What the traffic path would answer to `request` before forwarding it: the answer is a
    /// 200 with the rate-limit headers when it would be forwarded. The request's extensions
    /// carry its [`super::ClientAddr`] and [`crate::request_id::RequestId`].
    pub fn ask<B>(&self, request: Request<B>) -> ResponseFuture<Allow, B>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        self.limit.clone().call(request)
    }

    /// What the layer shares (the route table in force, the limiter).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

/// The service behind the layer when a proxy in front asks: every request it lets through is
/// allowed, and its outcome is never seen (an outcome-counted attempt stays counted).
#[derive(Clone, Copy)]
pub struct Allow;

impl<B> Service<Request<RequestBody<B>>> for Allow {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<RequestBody<B>>) -> Self::Future {
        let mut response = Response::new(Body::empty());
        response.extensions_mut().insert(OutcomeUnseen);
        std::future::ready(Ok(response))
    }
}

//! The rate-limit middleware's service: derive the key, ask the [`Limiter`], then forward the
//! request (with rate-limit headers on the answer) or answer 429 (or 503 when the store failed
//! and the route fails closed). A rejection is a response, never an `Err`, so hyper keeps the
//! connection. The verdict rides back on the response ([`Verdicts`]) for the access log.
//!
//! The route step ahead of this layer puts a [`Limited`] extension on the request: the route's
//! policy and the client's address. The service never looks the route up itself.

use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use http::{Request, Response};
use hyper::body::Incoming;
use tower::Service;

use super::headers::{add_headers, too_many_requests};
use super::{Limiter, RoutePolicy, Verdict, Waiting};
use crate::error::GatewayError;
use crate::key::{derive_key, KeySource};
use crate::metrics::DecisionLabel;
use crate::request_id::RequestId;

/// What the route step tells the limiter about a request (request extension).
#[derive(Clone)]
pub struct Limited {
    /// The matched route's policy.
    pub policy: Arc<RoutePolicy>,
    /// The client's address after trusted-proxy resolution.
    pub client_ip: IpAddr,
}

/// What the limiter concluded, for the access log (response extension).
#[derive(Debug, Clone)]
pub struct Verdicts {
    /// The request's entry in `slidegate_requests_total`, when it reached a decision.
    pub label: Option<DecisionLabel>,
    /// The limit that decided (the rejecting one, else the tightest).
    pub limit: Option<String>,
    /// The derived key as it is stored (hashed when it is a hashed key).
    pub key: Option<String>,
}

/// The middleware service; see [`super::RateLimitLayer`].
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    limiter: Arc<Limiter>,
}

impl<S> RateLimit<S> {
    /// Wraps `inner` (the proxy).
    pub fn new(inner: S, limiter: Arc<Limiter>) -> Self {
        RateLimit { inner, limiter }
    }
}

impl<S> Service<Request<Incoming>> for RateLimit<S>
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
        // The clone is not ready; the instance that was polled ready handles this request.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let limiter = self.limiter.clone();
        Box::pin(async move { Ok(handle(&limiter, inner, req).await) })
    }
}

async fn handle<S>(limiter: &Limiter, mut inner: S, mut req: Request<Incoming>) -> Response<Body>
where
    S: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>,
{
    let request_id = req
        .extensions()
        .get::<RequestId>()
        .cloned()
        .unwrap_or_else(RequestId::generate);
    let Some(Limited { policy, client_ip }) = req.extensions_mut().remove::<Limited>() else {
        // No route step ahead of this layer: nothing to limit.
        return forward(&mut inner, req).await;
    };
    let (verdict, key) = if !policy.has_limits() {
        (limiter.decide(&policy, "", 1, Waiting::Allowed).await, None)
    } else if policy.exempts(client_ip) {
        (limiter.exempt(&policy), None)
    } else {
        let source = KeySource {
            route: policy.name(),
            method: req.method(),
            path: req.uri().path(),
            query: req.uri().query(),
            headers: req.headers(),
            client_ip,
            ipv6_prefix: policy.ipv6_prefix,
            jwt: policy.jwt.as_deref(),
        };
        let key = match derive_key(&policy.config.key, policy.config.on_missing_key, &source) {
            Ok(k) => k,
            Err(missing) => {
                let mut response = GatewayError::from(missing).into_response(&request_id);
                response.extensions_mut().insert(Verdicts {
                    label: None,
                    limit: None,
                    key: None,
                });
                return response;
            }
        };
        let verdict = limiter.decide(&policy, &key, 1, Waiting::Allowed).await;
        (verdict, Some(key))
    };
    let mut response = if verdict.forwards() {
        let mut response = forward(&mut inner, req).await;
        if let (true, Some(d)) = (policy.config.headers, &verdict.decision) {
            // Shadow over-limit answers carry no headers: a dry run changes nothing clients see.
            if verdict.label != DecisionLabel::ShadowRejected {
                add_headers(
                    response.headers_mut(),
                    policy.tier_for(key.as_deref().unwrap_or("")),
                    d,
                );
            }
        }
        response
    } else {
        answer(&policy, key.as_deref().unwrap_or(""), &verdict, &request_id)
    };
    response.extensions_mut().insert(Verdicts {
        label: Some(verdict.label),
        limit: verdict
            .limit_index()
            .map(|i| policy.config.limits[i].name.clone()),
        key: key.map(|k| crate::key::storage_material(&k).into_owned()),
    });
    response
}

async fn forward<S>(inner: &mut S, req: Request<Incoming>) -> Response<Body>
where
    S: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>,
{
    match inner.call(req).await {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

/// The gateway's own answer to a request it does not forward: a 429, or a 503 when the store
/// failed and the route fails closed.
fn answer(
    policy: &RoutePolicy,
    key: &str,
    verdict: &Verdict,
    request_id: &RequestId,
) -> Response<Body> {
    match &verdict.decision {
        Some(decision) => {
            too_many_requests(policy.name(), policy.tier_for(key), decision, request_id)
        }
        None => GatewayError::StoreUnavailable.into_response(request_id),
    }
}

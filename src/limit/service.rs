//! The rate-limit middleware's service: find the route, derive the key, decide, then forward,
//! wait, or answer 429. A rejection is a response, never an `Err`, so hyper keeps the
//! connection. Each request counts exactly once in `slidegate_requests_total`.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use http::{Request, Response};
use hyper::body::Incoming;
use tower::Service;

use super::response::{add_headers, too_many_requests};
use super::{Decision, DecisionInput, Outcome, StoreError};
use crate::config::{ExceedMode, OnError};
use crate::error::GatewayError;
use crate::key::{client_ip, decision_base, derive_key, is_trusted, KeySource};
use crate::metrics::DecisionLabel;
use crate::proxy::Forward;
use crate::runtime::CompiledRoute;
use crate::state::GatewayState;

/// The TCP peer of a request, inserted by the server for each connection.
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub SocketAddr);

/// The middleware service; see [`super::RateLimitLayer`].
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    state: Arc<GatewayState>,
}

impl<S> RateLimit<S> {
    /// Wraps `inner` (the proxy).
    pub fn new(inner: S, state: Arc<GatewayState>) -> Self {
        RateLimit { inner, state }
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
        let state = self.state.clone();
        Box::pin(async move { Ok(handle(state, inner, req).await) })
    }
}

/// What the decision step concluded.
enum Verdict {
    /// Send it upstream; count it under `label`; describe `decision` in the headers.
    Forward {
        label: DecisionLabel,
        decision: Option<Decision>,
    },
    /// Answer with this response (already counted).
    Answer(Response<Body>),
}

async fn handle<S>(
    state: Arc<GatewayState>,
    mut inner: S,
    mut req: Request<Incoming>,
) -> Response<Body>
where
    S: Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>,
{
    if let Err(e) = crate::route::normalize_uri(req.uri_mut()) {
        return GatewayError::from(e).into_response();
    }
    let runtime = state.runtime.load_full();
    let Some(route) = runtime.find_route(req.method(), req.uri().path()).cloned() else {
        return GatewayError::NoRoute {
            method: req.method().to_string(),
            path: req.uri().path().to_string(),
        }
        .into_response();
    };
    let peer = req
        .extensions()
        .get::<PeerAddr>()
        .map_or(SocketAddr::from(([0, 0, 0, 0], 0)), |p| p.0);
    let trusted = &runtime.config.server.trusted_proxies;
    let peer_trusted = is_trusted(peer.ip(), trusted);

    let verdict = if route.config.limits.is_empty() {
        Verdict::Forward {
            label: DecisionLabel::Allowed,
            decision: None,
        }
    } else {
        let source = KeySource {
            route: &route.config.name,
            method: req.method(),
            path: req.uri().path(),
            query: req.uri().query(),
            headers: req.headers(),
            client_ip: client_ip(peer.ip(), req.headers(), trusted),
            jwt: runtime.jwt.as_ref(),
        };
        let key = match derive_key(&route.config.key, route.config.on_missing_key, &source) {
            Ok(k) => k,
            Err(missing) => return GatewayError::from(missing).into_response(),
        };
        let base = decision_base(&state.store_config.key_prefix, &route.config.name, &key);
        decide(&state, &route, &base).await
    };

    match verdict {
        Verdict::Answer(response) => response,
        Verdict::Forward { label, decision } => {
            route.metrics.decision(label);
            // The route is held on its own; a long stream must not keep an old config alive.
            drop(runtime);
            req.extensions_mut().insert(Forward {
                route: route.clone(),
                peer,
                peer_trusted,
            });
            let mut response = match inner.call(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            if let (true, Some(d), Some(policy)) = (route.config.headers, &decision, &route.policy)
            {
                if label != DecisionLabel::ShadowRejected {
                    add_headers(response.headers_mut(), policy, &route.config.limits, d);
                }
            }
            response
        }
    }
}

/// Decides one request of `route` for the key stored under `base`, by the route's mode.
async fn decide(state: &GatewayState, route: &CompiledRoute, base: &str) -> Verdict {
    let mode = &route.config.on_exceed;
    let enforcing = matches!(mode, ExceedMode::Reject | ExceedMode::Block { .. });
    if enforcing {
        let now = Instant::now();
        if let Some(denial) = state.deny_cache.get(base, now) {
            route.metrics.deny_cache_hits.inc();
            let decision = denial.current(now);
            let label = match decision.outcome {
                Outcome::Blocked => DecisionLabel::Blocked,
                _ => DecisionLabel::Rejected,
            };
            return reject(route, &decision, label);
        }
    }
    let started = Instant::now();
    let decision = match ask(state, route, base).await {
        Ok(d) => d,
        Err(verdict) => return verdict,
    };
    match (decision.outcome, mode) {
        (Outcome::Allowed, _) => Verdict::Forward {
            label: DecisionLabel::Allowed,
            decision: Some(decision),
        },
        (_, ExceedMode::Shadow) => Verdict::Forward {
            label: DecisionLabel::ShadowRejected,
            decision: Some(decision),
        },
        (
            _,
            ExceedMode::Delay {
                max_delay,
                max_waiting,
            },
        ) => {
            delay(
                state,
                route,
                base,
                decision,
                started + *max_delay,
                *max_waiting,
            )
            .await
        }
        (outcome, _) => {
            // The exceed that starts a block counts as rejected, the 429s after it as blocked.
            let label = match outcome {
                Outcome::Blocked => DecisionLabel::Blocked,
                _ => DecisionLabel::Rejected,
            };
            state.deny_cache.remember(base, started, &decision, mode);
            reject(route, &decision, label)
        }
    }
}

/// Asks the store (or, on failure, applies the route's `on_error`), recording time and usage.
async fn ask(state: &GatewayState, route: &CompiledRoute, base: &str) -> Result<Decision, Verdict> {
    let input = DecisionInput {
        route: &route.config,
        base,
        cost: 1,
        now_us: None,
    };
    let started = Instant::now();
    let result = state.store.decide(input).await;
    route.metrics.decision_duration[0].observe(started.elapsed().as_secs_f64());
    let decision = match result {
        Ok(d) => d,
        Err(e) => {
            state.metrics.store_error(e.kind());
            log_store_error(&route.config.name, &e);
            match route.config.on_error {
                OnError::Allow => {
                    return Err(Verdict::Forward {
                        label: DecisionLabel::StoreErrorAllowed,
                        decision: None,
                    })
                }
                OnError::Deny => {
                    route.metrics.decision(DecisionLabel::StoreErrorDenied);
                    return Err(Verdict::Answer(
                        GatewayError::StoreUnavailable.into_response(),
                    ));
                }
                OnError::Local => {
                    let started = Instant::now();
                    let d = state.fallback.decide(input);
                    route.metrics.decision_duration[1].observe(started.elapsed().as_secs_f64());
                    d
                }
            }
        }
    };
    for (usage, histogram) in decision.limits.iter().zip(&route.metrics.limit_utilization) {
        histogram.observe(usage.used as f64 / usage.limit as f64);
    }
    Ok(decision)
}

/// `on_exceed = "delay"`: wait (asleep, not holding a thread) until the request fits, if that
/// is before `deadline` and fewer than `max_waiting` requests of the route are waiting.
async fn delay(
    state: &GatewayState,
    route: &CompiledRoute,
    base: &str,
    first: Decision,
    deadline: Instant,
    max_waiting: usize,
) -> Verdict {
    if first.outcome != Outcome::Rejected || Instant::now() + first.retry_after > deadline {
        return reject(route, &first, DecisionLabel::Rejected);
    }
    let Some(_slot) = WaitingSlot::take(&route.waiting, max_waiting) else {
        return reject(route, &first, DecisionLabel::Rejected);
    };
    let mut decision = first;
    loop {
        let wake = Instant::now() + decision.retry_after;
        if wake > deadline {
            return reject(route, &decision, DecisionLabel::Rejected);
        }
        tokio::time::sleep_until(wake.into()).await;
        decision = match ask(state, route, base).await {
            Ok(d) => d,
            Err(verdict) => return verdict,
        };
        if decision.allowed() {
            return Verdict::Forward {
                label: DecisionLabel::Delayed,
                decision: Some(decision),
            };
        }
    }
}

/// One place in a delay route's waiting room, given back on drop.
struct WaitingSlot<'a>(&'a AtomicUsize);

impl<'a> WaitingSlot<'a> {
    fn take(waiting: &'a AtomicUsize, max: usize) -> Option<WaitingSlot<'a>> {
        let before = waiting.fetch_add(1, Ordering::AcqRel);
        if before >= max {
            waiting.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(WaitingSlot(waiting))
    }
}

impl Drop for WaitingSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The 429, counted under `label` and under the limit it names.
fn reject(route: &CompiledRoute, decision: &Decision, label: DecisionLabel) -> Verdict {
    route.metrics.decision(label);
    if let Some(i) = decision.rejecting_limit() {
        route.metrics.limit_exceeded[i].inc();
    }
    let policy = route
        .policy
        .as_ref()
        .expect("routes with limits have a policy header");
    Verdict::Answer(too_many_requests(
        &route.config.name,
        policy,
        &route.config.limits,
        decision,
    ))
}

/// Logs a store failure at most once a second (an outage would otherwise flood the log).
fn log_store_error(route: &str, error: &StoreError) {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let second = super::local_now_us() / 1_000_000;
    if LAST.swap(second, Ordering::Relaxed) != second {
        tracing::warn!(route, error = %error, "rate-limit store failed; applying on_error");
    }
}

//! One request's exchange with its upstream, as the future [`ProxyService`](super::ProxyService)
//! returns: the send ([`Upstream::forward`]'s future), bounded by the upstream's `timeout` from
//! the moment the request body has been sent (a request without one: its head handed to a
//! connection, so a connect is bounded by `connect_timeout` alone), a body on its way cut once
//! it has not moved for that `timeout` (408 when the client stopped sending, 504 when the
//! upstream stopped taking it), and then the answer: the
//! upstream's response, or
//! the gateway's 502 or 504, with the route's upstream metrics, the [`Attempt`] told the status,
//! and the [`UpstreamOutcome`] for the access log when it is on.
//!
//! Written by hand rather than as an `async` block around the send: such a block would store
//! the send's future next to its own copy of everything it captured, and the boxed whole was
//! twice the size of the small blocks the allocator serves from its fast path.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use http::Response;
use tokio::time::Sleep;

use super::sent_body::{BodyProgress, Stall};
use super::upstream::{BoxError, Upstream};
use crate::error::GatewayError;
use crate::layer::{Attempt, OutcomeUnseen};
use crate::metrics::RouteMetrics;
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

pin_project_lite::pin_project! {
    /// The exchange's future; `F` is the send's.
    pub struct Exchange<F> {
        #[pin]
        send: F,
        // While the body is on its way, when to check that it still moves; once it has been
        // sent, the upstream's deadline.
        #[pin]
        deadline: Option<Sleep>,
        // `deadline` is the check that the body still moves.
        checks_the_body: bool,
        progress: Option<Arc<BodyProgress>>,
        upstream: Arc<Upstream>,
        metrics: Arc<RouteMetrics>,
        attempt: Attempt,
        request_id: RequestId,
        started: Instant,
    }
}

impl<F> Exchange<F> {
    /// The exchange of the send `send`, whose body reports to `progress`.
    pub fn new(
        send: F,
        progress: Option<Arc<BodyProgress>>,
        upstream: Arc<Upstream>,
        metrics: Arc<RouteMetrics>,
        attempt: Attempt,
        request_id: RequestId,
    ) -> Self {
        Exchange {
            send,
            deadline: None,
            checks_the_body: false,
            progress,
            upstream,
            metrics,
            attempt,
            request_id,
            started: Instant::now(),
        }
    }
}

impl<F> Future for Exchange<F>
where
    F: Future<Output = Result<Response<Body>, BoxError>>,
{
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let progress = this.progress.as_deref();
        let result = match this.send.poll(cx) {
            Poll::Ready(result) => result.map_err(|e| this.upstream.failed(e, progress)),
            Poll::Pending => {
                // Sent: its body's end polled, or (no body) its head handed to a connection. A
                // connect, retried within `connect_timeout`, is not the upstream's answer.
                let sent = match progress {
                    Some(p) => p.sent.load(Ordering::Relaxed),
                    None => this.attempt.is_out(),
                };
                let timeout = this.upstream.config.timeout;
                if sent && (this.deadline.is_none() || *this.checks_the_body) {
                    *this.checks_the_body = false;
                    this.deadline.set(Some(tokio::time::sleep(timeout)));
                } else if !sent && this.deadline.is_none() && progress.is_some() {
                    *this.checks_the_body = true;
                    this.deadline.set(Some(tokio::time::sleep(timeout)));
                }
                let Some(mut deadline) = this.deadline.as_mut().as_pin_mut() else {
                    return Poll::Pending;
                };
                std::task::ready!(deadline.as_mut().poll(cx));
                match (*this.checks_the_body, progress.map(|p| p.stalled(timeout))) {
                    // A body that does not move for the upstream's `timeout` is cut, as NGINX
                    // cuts one with `client_body_timeout` and `proxy_send_timeout`: the
                    // client's stall is a 408, the upstream's a 504.
                    (true, Some(Ok(Stall::Client))) => Err(GatewayError::BodyTimeout {
                        timeout_ms: timeout.as_millis(),
                    }),
                    (true, Some(Err(left))) => {
                        deadline.as_mut().reset(tokio::time::Instant::now() + left);
                        if deadline.poll(cx).is_ready() {
                            cx.waker().wake_by_ref();
                        }
                        return Poll::Pending;
                    }
                    _ => Err(this.upstream.timed_out()),
                }
            }
        };
        let duration = this.started.elapsed();
        let metrics = &**this.metrics;
        metrics.upstream_duration.observe(duration.as_secs_f64());
        let (mut response, status) = match result {
            Ok(response) => {
                let status = response.status().as_u16();
                this.attempt.answered(status);
                metrics.upstream(Some(status));
                (response, Some(status))
            }
            // The client's body failed or stopped coming: the upstream neither answered nor
            // failed. Once the head went out, the upstream may have acted on it (an SMS sent
            // for a number in the query): its answer never comes, so the 400 or 408 says
            // nothing of the attempt's outcome and the attempt stays counted.
            Err(
                e @ (GatewayError::BodyUnreadable(_)
                | GatewayError::ClientLeft
                | GatewayError::BodyTimeout { .. }),
            ) => {
                let mut response = e.into_response(this.request_id);
                if this.attempt.is_out() {
                    response.extensions_mut().insert(OutcomeUnseen);
                }
                (response, None)
            }
            Err(e) => {
                metrics.upstream(None);
                (e.into_response(this.request_id), None)
            }
        };
        // Only the access log reads it: unlogged, it would cost an allocation and a map of its
        // own on every answer.
        if crate::access_log::enabled() {
            response
                .extensions_mut()
                .insert(UpstreamOutcome { status, duration });
        }
        Poll::Ready(Ok(response))
    }
}

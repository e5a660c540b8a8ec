//! An attempt the layer forwards to its inner service, from the call to its settlement, and what
//! becomes of it when its client leaves before the answer: once any of the request went
//! upstream, the upstream may act on it (send the SMS, check the password), so its answer is
//! still read, in a task of its own, and the reservation settled by its status; an attempt whose
//! status never arrives stays counted; only one the upstream never saw is refunded at once.
//!
//! **When "any of the request went upstream".** A service that forwards says so through the
//! request's [`Attempt`]: it calls [`Attempt::track`] when it takes the request and
//! [`Attempt::sent`] at the moment it hands the request to an open upstream connection (the
//! gateway's proxy: just before the connection's next poll, which writes the head). From then on
//! bytes of it may be on the wire, so the attempt counts as seen and is carried to its answer if
//! the client leaves; before it (routing, reading the body, deciding, connecting) nothing of it
//! can have reached the upstream. The last moment the gateway can still take the request back
//! unseen is the first byte of its head: marking the hand-over rather than that write costs no
//! hook in the connection's I/O and errs on the counted side only, by the time between handing
//! the request over and the connection's write, in which the client would have to leave (and the
//! request is then still written: the upstream does see it). A service that does not track (an
//! embedded app's handler) has seen the request once it is called.
//!
//! Differences from letting the inner future go with the client's (hyper drops the service
//! future when the client leaves): a forwarded call is boxed, so that it can move into a task of
//! its own when the layer's future is dropped; that task costs nothing unless a client leaves.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU16, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::Response;
use http_body_util::BodyExt;

use super::body::{BoxError, ResponseBody};
use super::extensions::{Decided, OutcomeUnseen};
use super::meter::{read_on, BoxBody, MeteredBody};
use crate::limit::headers::add_headers;
use crate::limit::{Recount, Reservation, Tier, Verdict};
use crate::route::Route;
use crate::store::Decision;

/// How far a forwarded request got, as its forwarding service tells the layer (a request
/// extension). Clones share it.
#[derive(Clone, Default)]
pub struct Attempt(Arc<Progress>);

#[derive(Default)]
struct Progress {
    /// [`UNTRACKED`], [`TRACKED`] or [`SENT`].
    stage: AtomicU8,
    /// The upstream's status, 0 until it answered.
    status: AtomicU16,
}

/// The service never said: it saw the request when it was called.
const UNTRACKED: u8 = 0;
/// The service will say when the request goes out; it has not yet.
const TRACKED: u8 = 1;
/// Some of the request went (or is going) to the upstream.
const SENT: u8 = 2;

impl Attempt {
    /// The service takes the request and will call [`Attempt::sent`] when it goes out; until
    /// then the upstream has not seen it.
    pub fn track(&self) {
        self.0.stage.store(TRACKED, Ordering::Release);
    }

    /// The request is handed to an open upstream connection: the upstream may see it from now.
    pub fn sent(&self) {
        self.0.stage.store(SENT, Ordering::Release);
    }

    /// The request came back unsent (a kept-alive connection had closed before writing it);
    /// it is not seen until it is handed to another one.
    pub fn unsent(&self) {
        self.0.stage.store(TRACKED, Ordering::Release);
    }

    /// The upstream answered with `status` (its own response head, not the service's answer
    /// when the upstream could not be reached or timed out).
    pub fn answered(&self, status: u16) {
        self.0.status.store(status, Ordering::Release);
    }

    /// Whether the request is out: handed to an upstream connection ([`Attempt::sent`]) and not
    /// handed back. The forwarding service's own clock for the upstream's answer starts here.
    pub(crate) fn is_out(&self) -> bool {
        self.0.stage.load(Ordering::Acquire) == SENT
    }

    /// Whether the upstream may have seen any of the request.
    fn seen(&self) -> bool {
        self.0.stage.load(Ordering::Acquire) != TRACKED
    }

    /// Whether the service says when the request goes out (a forwarding proxy, which also
    /// counts the upstream's answer in its metrics, so it is read to its end).
    fn tracked(&self) -> bool {
        self.0.stage.load(Ordering::Acquire) != UNTRACKED
    }

    /// The status the attempt is settled by once its client left: the upstream's as the
    /// service reported it, or (a service that does not track) its own answer's.
    fn status_after_leaving(&self, answered: Option<u16>) -> Option<u16> {
        match self.0.stage.load(Ordering::Acquire) {
            UNTRACKED => answered,
            _ => Some(self.0.status.load(Ordering::Acquire)).filter(|&s| s != 0),
        }
    }
}

/// What became of a request whose client left before its answer, for an access log.
pub struct Departed {
    /// What the layer decided, as far as it got.
    pub decided: Decided,
    /// The inner service's answer, read after the client left (status, headers, extensions);
    /// `None` when the request never reached it, or its call failed.
    pub answer: Option<http::response::Parts>,
}

/// Told once what became of a request whose client left ([`super::ResponseFuture::client_left`]).
pub type OnDeparted = Box<dyn FnOnce(Departed) + Send>;

/// A forwarded call of the inner service, boxed so that it can outlive its client.
pub(super) type InnerCall<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What a forwarded request's answer needs: the verdict (for its headers) and when it came,
/// the reservation to settle, and what the access log shows.
pub(super) struct Settling {
    pub route: Arc<Route>,
    pub tier: Option<Arc<Tier>>,
    pub verdict: Verdict,
    pub decided_at: Instant,
    /// The answer counts in `slidegate_upstream_*` (an embedded layer's app).
    pub inner_is_upstream: bool,
    pub reservation: Option<Reservation>,
    pub decided: Decided,
}

/// A body the layer can meter: the inner service's, boxed when its attempt settles at its end.
fn boxed<ResB>(body: ResB) -> BoxBody
where
    ResB: http_body::Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

/// A forwarded request's answer: ready, or waiting for the count a reset left.
// Matched at once where it is made; boxing the common variant would cost an allocation an answer.
#[allow(clippy::large_enum_variant)]
pub(super) enum Finished<ResB> {
    Ready(Response<ResponseBody<ResB>>),
    Recounting(Box<Recounting>),
}

/// An answer whose status reset a limit, held until the store tells the count the reset left
/// (it forgives only answers, and only the value sent: attempts still in flight, or counted for
/// another spelling of a merged key, stay), so its headers say what the next attempt meets.
pub(super) struct Recounting {
    /// The answer, its body boxed (a reset is a rare answer: a successful login).
    response: Response<axum::body::Body>,
    decision: Decision,
    reset: Vec<usize>,
    tier: Arc<Tier>,
    decided_at: Instant,
    recount: Recount,
}

impl Recounting {
    /// The answer with its headers once the count is in: the reset limits' as the store tells
    /// them (as the settlement alone says, when it cannot), the others' as decided.
    pub fn poll_answer(&mut self, cx: &mut Context<'_>) -> Poll<Response<axum::body::Body>> {
        let fresh = std::task::ready!(self.recount.as_mut().poll(cx));
        let d = &mut self.decision;
        d.age(self.decided_at.elapsed());
        if let Some(read) = fresh {
            for &i in &self.reset {
                if let (Some(used), Some(now)) = (d.limits.get_mut(i), read.limits.get(i)) {
                    *used = now.clone();
                }
            }
        }
        let mut response = std::mem::take(&mut self.response);
        add_headers(response.headers_mut(), &self.tier, d);
        Poll::Ready(response)
    }

    /// What the access log shows of it when its client leaves while it waits.
    pub fn departed(self) -> Departed {
        let (mut parts, _) = self.response.into_parts();
        let decided = parts.extensions.remove::<Decided>().unwrap_or_default();
        Departed {
            decided,
            answer: Some(parts),
        }
    }
}

impl Settling {
    /// The inner service's answer with the rate-limit headers (showing the settlement of its
    /// reservation) and what was decided; a body whose end settles the attempt is metered. An
    /// answer that reset a limit waits for the store's count first ([`Recounting`]).
    pub fn finish<ResB>(mut self, response: Response<ResB>) -> Finished<ResB>
    where
        ResB: http_body::Body<Data = Bytes> + Send + 'static,
        ResB::Error: Into<BoxError>,
    {
        let status = response.status().as_u16();
        self.count_upstream(Some(status));
        // Forward auth answers before the request is served, and a proxy whose client's body
        // broke off after the head went upstream answers for it: no status of the attempt's
        // own will come, so it stays counted.
        let unseen = response.extensions().get::<OutcomeUnseen>().is_some();
        let mut decision = self.verdict.decision.take();
        let headers = self.route.config.headers;
        let mut recount = None;
        let (settled, ending) = match self.reservation.take() {
            Some(reservation) if unseen => {
                reservation.keep();
                (None, None)
            }
            Some(reservation) => {
                recount = reservation.recount_on(status).filter(|_| headers);
                let (settled, ending) = reservation.settle(status, response.headers());
                (Some(settled), ending)
            }
            None => (None, None),
        };
        // the limits whose count the store tells again (only an answer that reset one)
        let reset = match (&recount, &settled) {
            (Some(_), Some(s)) => s.reset.clone(),
            _ => Vec::new(),
        };
        if let (Some(settled), Some(d)) = (settled, &mut decision) {
            settled.apply(d);
        }
        let mut response = match ending {
            Some(ending) => response.map(|b| ResponseBody::Metered {
                body: MeteredBody::new(boxed(b), ending),
            }),
            None => response.map(ResponseBody::inner),
        };
        response.extensions_mut().insert(self.decided);
        let (Some(mut d), Some(tier), true) = (decision, self.tier, headers) else {
            return Finished::Ready(response);
        };
        if let Some(recount) = recount {
            return Finished::Recounting(Box::new(Recounting {
                response: response.map(axum::body::Body::new),
                decision: d,
                reset,
                tier,
                decided_at: self.decided_at,
                recount,
            }));
        }
        // `t` and the resets count from now, not from the decision: the upstream took its time
        // to answer
        d.age(self.decided_at.elapsed());
        add_headers(response.headers_mut(), &tier, &d);
        Finished::Ready(response)
    }

    /// Counts the app's answer (`None`: none came) as the upstream's, for an embedded layer.
    fn count_upstream(&self, status: Option<u16>) {
        if self.inner_is_upstream {
            let metrics = &self.route.metrics;
            metrics.upstream(status);
            (metrics.upstream_duration).observe(self.decided_at.elapsed().as_secs_f64());
        }
    }

    /// The client left before the request went upstream: the reservation goes back at once.
    pub fn abandon(mut self: Box<Self>) -> Departed {
        if let Some(reservation) = self.reservation.take() {
            reservation.abandon();
        }
        Departed {
            decided: self.decided,
            answer: None,
        }
    }
}

/// The client of a forwarded request left: an attempt the upstream may have seen is carried to
/// its answer in a task of its own and settled by the upstream's status (kept when none
/// arrives); one it never saw is dropped and refunded at once. `then` hears the end either way.
/// A call with nothing waiting for its end (no reservation, no `then`, a service that does not
/// track it: an embedded app's handler on a route that does not count outcomes) is dropped, as
/// hyper would.
pub(super) fn leave<ResB, E>(
    call: InnerCall<Result<Response<ResB>, E>>,
    settling: Box<Settling>,
    attempt: &Attempt,
    then: Option<OnDeparted>,
) where
    ResB: http_body::Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
    E: 'static,
{
    if !attempt.seen() {
        drop(call);
        tell(then, settling.abandon());
        return;
    }
    let awaited = settling.reservation.is_some() || then.is_some() || attempt.tracked();
    let runtime = tokio::runtime::Handle::try_current();
    let (true, Ok(runtime)) = (awaited, runtime) else {
        // Nothing waits for its end, or no runtime is left to finish it on: dropped, and its
        // reservation (if any) stays counted.
        drop(call);
        let decided = settling.decided;
        tell(
            then,
            Departed {
                decided,
                answer: None,
            },
        );
        return;
    };
    let attempt = attempt.clone();
    runtime.spawn(async move {
        let (answer, body) = match call.await.ok().map(Response::into_parts) {
            Some((parts, body)) => (Some(parts), Some(body)),
            None => (None, None),
        };
        let mut settling = settling;
        settling.count_upstream(answer.as_ref().map(|a| a.status.as_u16()));
        let status = attempt.status_after_leaving(answer.as_ref().map(|a| a.status.as_u16()));
        let mut ending = None;
        if let Some(reservation) = settling.reservation.take() {
            match (status, &answer) {
                (Some(status), Some(parts)) => {
                    ending = reservation.settle(status, &parts.headers).1
                }
                (Some(status), None) => ending = reservation.settle(status, &Default::default()).1,
                (None, _) => reservation.keep(),
            }
        }
        let decided = settling.decided;
        tell(then, Departed { decided, answer });
        // the upstream answered: a cost its body states is still read, its slots held until
        // then (an ending with nothing to read frees them at once)
        if let (Some(ending), Some(body)) = (ending, body) {
            read_on(boxed(body), ending).await;
        }
    });
}

fn tell(then: Option<OnDeparted>, departed: Departed) {
    if let Some(then) = then {
        then(departed);
    }
}

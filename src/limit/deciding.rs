//! [`Deciding`]: one request's decision as a future the request path polls: the deny cache, the
//! store's answer, the route's `on_error`, and for `on_exceed = "delay"` the waits for room, each
//! a state of its own (no boxed future per request). It is counted once when it finishes.
//!
//! A request whose client goes away while the store decides is still concluded and counted: the
//! store may already have charged it. Dropping an unfinished `Deciding` hands its answer to a
//! task of its own, which also takes the charge back when the route counts outcomes (the
//! attempt never reached the upstream). One whose client goes away while it waits for room
//! counts as `delayed`, what the route did with it, with no exceedance: no 429 was sent, and
//! the store charged nothing for it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use super::delay::Delay;
use super::keys::RequestKeys;
use super::limiter::Limiter;
use super::outcome::Reservation;
use super::policy::RoutePolicy;
use super::tier::Tier;
use super::verdict::Verdict;
use crate::config::ExceedMode;
use crate::metrics::DecisionLabel;
use crate::store::{Answer, Decision, DecisionRequest, StoreError};

/// One request's decision, from the deny cache or the store, waiting for room on a delay route.
pub struct Deciding {
    request: Request,
    state: State,
}

/// What the decision is about, shared by every state (and by the task that finishes a dropped
/// decision).
struct Request {
    limiter: Arc<Limiter>,
    policy: Arc<RoutePolicy>,
    tier: Arc<Tier>,
    keys: Arc<RequestKeys>,
    cost: u64,
    /// Whether the verdict is counted in `slidegate_requests_total` when it is reached (a
    /// caller that decides a request in several steps counts it once itself).
    counted: bool,
    /// Whether the store answers with a receipt of what it charged even where the route's
    /// answers settle nothing (a caller that may take the charge back asks for one).
    receipt: bool,
    /// When the caller stops waiting for the answer (a gRPC caller's deadline): a delay that
    /// would end later is a refusal now.
    answer_by: Option<Instant>,
}

enum State {
    Start,
    Asking {
        answer: Answer,
        started: Instant,
        delay: Option<Delay>,
    },
    /// Waiting for room after `Verdict`, the refusal it waits out.
    Sleeping(Delay, Verdict),
    Done,
}

impl Request {
    /// What the store is asked; it answers with a receipt where the caller may take the
    /// charge back or the route's answers settle it.
    fn store_request(&self) -> DecisionRequest<'_> {
        DecisionRequest {
            limits: &self.tier.limits,
            bases: &self.keys.bases,
            cost: self.cost,
            dry_run: false,
            receipt: self.receipt || self.policy.settles(),
        }
    }

    fn ask(&self) -> Answer {
        self.limiter.store.submit(self.store_request())
    }

    /// The verdict on the store's answer; a failed store call may be decided by the in-process
    /// fallback, which then gives the receipt the store would have.
    fn conclude(&self, result: Result<Decision, StoreError>, started: Instant) -> Verdict {
        let verdict = self.limiter.conclude(
            &self.policy,
            self.store_request(),
            &self.tier,
            result,
            started,
            started.elapsed(),
        );
        self.limiter.note_blocks(&self.policy, &verdict);
        verdict
    }
}

impl Deciding {
    /// Decides a request of `policy`'s route with `keys` and the values of `tier`.
    pub fn new(
        limiter: Arc<Limiter>,
        policy: Arc<RoutePolicy>,
        tier: Arc<Tier>,
        keys: Arc<RequestKeys>,
        cost: u64,
    ) -> Deciding {
        Deciding {
            request: Request {
                limiter,
                policy,
                tier,
                keys,
                cost,
                counted: true,
                receipt: false,
                answer_by: None,
            },
            state: State::Start,
        }
    }

    /// The same decision, not counted in `slidegate_requests_total` when it finishes: the
    /// caller counts the request once with [`Limiter::record`] (the rate-limit service decides
    /// a request whose shadow-mode limits refused it a second time, without them).
    pub fn uncounted(mut self) -> Deciding {
        self.request.counted = false;
        self
    }

    /// The same decision, answered with a receipt of what it charged (when it charged), so the
    /// caller can take the charge back: the rate-limit service does when a later group of the
    /// same request refuses it.
    pub fn with_receipt(mut self) -> Deciding {
        self.request.receipt = true;
        self
    }

    /// The same decision, for a caller that stops waiting at `by` (Envoy's ext_authz call has
    /// a deadline, 200 ms unless set): a delay route waits at most until then, and a refusal
    /// whose wait ends later is answered at once, as a 429 the caller can act on, rather than
    /// held past the deadline (where Envoy denies with no `Retry-After`, or lets the request
    /// through uncharged).
    pub fn answer_by(mut self, by: Instant) -> Deciding {
        self.request.answer_by = Some(by);
        self
    }

    /// What the route did with a request still waiting for room, as its client leaves: it was
    /// `delayed`, standing on the refusal it waits out (`None` while it is not waiting). While
    /// the store is asked again after a wait, that refusal is gone: the verdict names no limit.
    pub fn waiting(&self) -> Option<Verdict> {
        let mut verdict = match &self.state {
            State::Sleeping(_, waited_out) => waited_out.clone(),
            State::Asking { delay: Some(_), .. } => {
                let tier = self.request.tier.name.as_ref();
                Verdict::new(DecisionLabel::Delayed, None, tier)
            }
            _ => return None,
        };
        verdict.label = DecisionLabel::Delayed;
        Some(verdict)
    }

    fn finish(&mut self, verdict: Verdict) -> Poll<Verdict> {
        self.state = State::Done;
        let r = &self.request;
        if r.counted {
            r.limiter.record(&r.policy, &verdict);
        }
        Poll::Ready(verdict)
    }

    /// What follows a store's verdict: a delay route waits (`Some`), or the request path is
    /// done with the verdict (`None`; a delayed request that now fits is `delayed`).
    fn after(&self, verdict: &mut Verdict, delay: Option<Delay>) -> Option<Delay> {
        let wait = verdict.retry_after();
        match (delay, verdict.label) {
            (None, DecisionLabel::Rejected) => match &self.request.policy.config.on_exceed {
                ExceedMode::Delay {
                    max_delay,
                    max_waiting,
                } => {
                    let left = self
                        .request
                        .answer_by
                        .map(|by| by.saturating_duration_since(Instant::now()));
                    let max_delay = left.map_or(*max_delay, |left| left.min(*max_delay));
                    Delay::start(&self.request.policy, wait, max_delay, *max_waiting)
                }
                _ => None,
            },
            (Some(_), DecisionLabel::Allowed) => {
                verdict.label = DecisionLabel::Delayed;
                None
            }
            (Some(delay), DecisionLabel::Rejected) => delay.again(wait),
            _ => None,
        }
    }
}

impl Future for Deciding {
    type Output = Verdict;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Verdict> {
        let this = self.get_mut();
        loop {
            match &mut this.state {
                State::Start => {
                    let r = &this.request;
                    if let Some(verdict) =
                        r.limiter.cached(&r.policy, &r.keys.bases, &r.tier, r.cost)
                    {
                        return this.finish(verdict);
                    }
                    // taken before the store is asked: a refusal it answers is not
                    // remembered where room was given back since
                    let started = Instant::now();
                    this.state = State::Asking {
                        answer: r.ask(),
                        started,
                        delay: None,
                    };
                }
                State::Asking {
                    answer, started, ..
                } => {
                    let result = std::task::ready!(Pin::new(answer).poll(cx));
                    let mut verdict = this.request.conclude(result, *started);
                    let State::Asking { delay, .. } =
                        std::mem::replace(&mut this.state, State::Done)
                    else {
                        unreachable!("asking")
                    };
                    match this.after(&mut verdict, delay) {
                        Some(delay) => this.state = State::Sleeping(delay, verdict),
                        None => return this.finish(verdict),
                    }
                }
                State::Sleeping(delay, _) => {
                    std::task::ready!(delay.poll_sleep(cx));
                    let State::Sleeping(delay, _) = std::mem::replace(&mut this.state, State::Done)
                    else {
                        unreachable!("sleeping")
                    };
                    let started = Instant::now();
                    this.state = State::Asking {
                        answer: this.request.ask(),
                        started,
                        delay: Some(delay),
                    };
                }
                State::Done => panic!("Deciding polled after it finished"),
            }
        }
    }
}

impl Drop for Deciding {
    fn drop(&mut self) {
        if matches!(self.state, State::Sleeping(..)) {
            if let (true, Some(delayed)) = (self.request.counted, self.waiting()) {
                self.request.limiter.record(&self.request.policy, &delayed);
            }
            return;
        }
        let (answer, started, delayed) = match std::mem::replace(&mut self.state, State::Done) {
            State::Asking {
                answer,
                started,
                delay,
            } => (answer, started, delay),
            State::Sleeping(..) | State::Start | State::Done => return,
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let request = Request {
            limiter: self.request.limiter.clone(),
            policy: self.request.policy.clone(),
            tier: self.request.tier.clone(),
            keys: self.request.keys.clone(),
            cost: self.request.cost,
            counted: self.request.counted,
            receipt: self.request.receipt,
            answer_by: self.request.answer_by,
        };
        runtime.spawn(async move {
            let mut verdict = request.conclude(answer.await, started);
            // It waited for room and its client left: delayed, whatever this last ask says
            // (no 429 was sent).
            let waited = matches!(
                verdict.label,
                DecisionLabel::Allowed | DecisionLabel::Rejected
            );
            if delayed.is_some() && waited {
                verdict.label = DecisionLabel::Delayed;
            }
            if request.counted {
                request.limiter.record(&request.policy, &verdict);
            }
            // its place in the waiting room is given back once it is counted
            drop(delayed);
            // Never reached the upstream: a reservation goes back at once.
            if let Some(reservation) = Reservation::of(
                &request.limiter,
                &request.policy,
                &request.tier,
                &request.keys,
                &mut verdict,
            ) {
                reservation.abandon();
            }
        });
    }
}

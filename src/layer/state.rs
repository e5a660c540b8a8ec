//! The states of one request through the layer ([`State`]), what it carries from one to the
//! next ([`Step`]: its head, body, route, keys and tier), and the steps that move it on: derive
//! its keys and start deciding, refuse it, conclude the decision, forward it to the inner
//! service (boxed, so that it can outlive its client: [`super::attempt`]), and what the access
//! log shows of it. The future that drives them is `future.rs`.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::ACCEPT_ENCODING;
use http::request::Parts;
use http::{HeaderValue, Request, Response};
use tower::Service;

use super::attempt::{self, Attempt, InnerCall, OnDeparted, Recounting, Settling};
use super::body::{BoxError, RequestBody};
use super::extensions::{AnswerBy, Decided, MatchedRoute};
use super::read::Reading;
use crate::error::GatewayError;
use crate::key::KeySource;
use crate::limit::{Deciding, Limiter, RequestKeys, Reservation, Tier, Verdict};
use crate::metrics::DecisionLabel;
use crate::request_id::RequestId;
use crate::route::Route;

/// The inner service's answer, as its future gives it.
pub(super) type Answered<S, B> = Result<
    <S as Service<Request<RequestBody<B>>>>::Response,
    <S as Service<Request<RequestBody<B>>>>::Error,
>;

pin_project_lite::pin_project! {
    #[project = StateProj]
    pub(super) enum State<S, B>
    where
        S: Service<Request<RequestBody<B>>>,
    {
        Answer { response: Option<Response<axum::body::Body>>, decided: Option<Decided> },
        Reading { step: Option<Box<Step<S, B>>>, reading: Reading<B> },
        Deciding { step: Option<Box<Step<S, B>>>, deciding: Deciding },
        // A request no route takes, passed through as it is.
        Calling { #[pin] future: S::Future },
        // A routed request at the inner service; `leave` carries it on when the client leaves.
        Forwarding {
            call: Option<InnerCall<Answered<S, B>>>,
            settling: Option<Box<Settling>>,
            attempt: Attempt,
            leave: Leave<S, B>,
        },
        // The answer, its headers waiting for the count a reset left.
        Recounting { recounting: Option<Box<Recounting>> },
        Done,
    }
}

/// [`attempt::leave`] for the inner service's answer type.
pub(super) type Leave<S, B> =
    fn(InnerCall<Answered<S, B>>, Box<Settling>, &Attempt, Option<OnDeparted>);

impl<S, B> State<S, B>
where
    S: Service<Request<RequestBody<B>>>,
{
    pub(super) fn answer(response: Response<axum::body::Body>, decided: Decided) -> Self {
        State::Answer {
            response: Some(response),
            decided: Some(decided),
        }
    }
}

/// What a request carries from state to state.
pub(super) struct Step<S, B> {
    pub inner: S,
    pub head: Parts,
    pub body: Option<RequestBody<B>>,
    pub route: Arc<Route>,
    pub limiter: Arc<Limiter>,
    pub request_id: RequestId,
    pub client_ip: IpAddr,
    pub keys: Option<Arc<RequestKeys>>,
    pub tier: Option<Arc<Tier>>,
    /// Its answer counts as the upstream's (`super::Shared::inner_is_upstream`).
    pub inner_is_upstream: bool,
}

impl<S, B> Step<S, B>
where
    S: Service<Request<RequestBody<B>>>,
{
    /// What the access log shows of this request.
    pub fn decided(&self, verdict: Option<&Verdict>) -> Decided {
        let limits = &self.route.config.limits;
        let limit_index = verdict.and_then(Verdict::limit_index);
        let config = &self.route.config;
        if !config.access_log {
            // Nothing reads the names of a request that is not logged.
            return Decided {
                log: Some((false, config.access_log_sample)),
                label: verdict.map(|v| v.label),
                ..Decided::default()
            };
        }
        Decided {
            route: Some(config.name.clone()),
            log: Some((config.access_log, config.access_log_sample)),
            label: verdict.map(|v| v.label),
            limit: limit_index.map(|i| limits[i].name.clone()),
            key: self
                .keys
                .as_ref()
                .and_then(|k| {
                    limit_index.map_or(k.shown(), |i| {
                        k.keys.get(self.route.policy.slot_of(i)).map(String::as_str)
                    })
                })
                .map(|k| crate::store::layout::logged_key(k).into_owned()),
        }
    }
}

impl<S, B, ResB> Step<S, B>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResB>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    ResB: http_body::Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    /// Derives the request's keys and its tier, and starts deciding (or refuses the request).
    pub fn decide(mut self: Box<Self>) -> State<S, B> {
        let policy = &self.route.policy;
        let body = match &self.body {
            Some(RequestBody::Buffered { bytes }) => Some(bytes.as_deref().unwrap_or_default()),
            _ => None,
        };
        let src = KeySource {
            route: policy.name(),
            method: &self.head.method,
            path: self.head.uri.path(),
            path_case: policy.path_case,
            query: self.head.uri.query(),
            headers: &self.head.headers,
            authority: self.head.uri.authority().map(|a| a.as_str()),
            body,
            client_ip: self.client_ip,
            ipv6_prefix: policy.ipv6_prefix,
            jwt: policy.jwt.as_deref(),
            hash_secret: policy.hash_secret.as_ref(),
        };
        let keys = match RequestKeys::derive(policy, &src) {
            Ok(keys) => Arc::new(keys),
            Err(e) => return self.refuse(e.into()),
        };
        let Some(tier) = policy
            .tier_for(keys.route_key.as_deref().unwrap_or(""))
            .cloned()
        else {
            return self.refuse(GatewayError::UnknownKey);
        };
        // what the request reserves of the limits whose answer states its cost (1 elsewhere)
        let cost = match policy.reservation(&tier, body, &self.head.headers) {
            Ok(cost) => cost,
            Err(e) => return self.refuse(e.into()),
        };
        let mut deciding = Deciding::new(
            self.limiter.clone(),
            self.route.policy.clone(),
            tier.clone(),
            keys.clone(),
            cost,
        );
        if let Some(AnswerBy(by)) = self.head.extensions.get::<AnswerBy>() {
            deciding = deciding.answer_by(*by);
        }
        self.keys = Some(keys);
        self.tier = Some(tier);
        State::Deciding {
            step: Some(self),
            deciding,
        }
    }

    /// The gateway's own answer to a request it refuses for what the client sent (counted as
    /// `bad_request`) or could not read.
    pub fn refuse(&self, error: GatewayError) -> State<S, B> {
        let mut decided = self.decided(None);
        if error.is_bad_request() {
            let policy = &self.route.policy;
            let verdict = self.limiter.uncounted(policy, DecisionLabel::BadRequest);
            decided.label = Some(verdict.label);
        }
        State::answer(error.into_response(&self.request_id), decided)
    }

    /// After the decision: forwarded, or answered with a 429 (or a 503 when the store failed
    /// and the route fails closed).
    pub fn conclude(self, mut verdict: Verdict) -> State<S, B> {
        if verdict.forwards() {
            let reservation = match (&self.tier, &self.keys) {
                (Some(tier), Some(keys)) => {
                    let (limiter, policy) = (&self.limiter, &self.route.policy);
                    Reservation::of(limiter, policy, tier, keys, &mut verdict)
                }
                _ => None,
            };
            return self.forward(verdict, reservation);
        }
        let decided = self.decided(Some(&verdict));
        let response = match (&verdict.decision, &self.tier) {
            (Some(d), Some(tier)) => {
                let headers = self.route.config.headers;
                tier.refusal.answer(d, &self.request_id, headers)
            }
            _ => GatewayError::StoreUnavailable.into_response(&self.request_id),
        };
        State::answer(response, decided)
    }

    /// Calls the inner service with the request, the matched route and the [`Attempt`] in its
    /// extensions; the call is boxed so that it can outlive its client.
    pub fn forward(self, verdict: Verdict, reservation: Option<Reservation>) -> State<S, B> {
        let decided = self.decided(Some(&verdict));
        let Step {
            mut inner,
            mut head,
            body,
            route,
            client_ip,
            tier,
            inner_is_upstream,
            ..
        } = self;
        head.extensions.insert(MatchedRoute {
            route: route.clone(),
            client_ip,
        });
        if reservation.is_some() && route.policy.reads_answer_body() {
            // an answer the gateway can read as it passes: one it could not (compressed) would
            // state no cost, whatever it cost
            head.headers
                .insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        }
        let attempt = Attempt::default();
        head.extensions.insert(attempt.clone());
        let body = body.expect("the body is there once decided");
        let call: InnerCall<Answered<S, B>> = Box::pin(inner.call(Request::from_parts(head, body)));
        State::Forwarding {
            call: Some(call),
            settling: Some(Box::new(Settling {
                route,
                tier,
                verdict,
                decided_at: Instant::now(),
                inner_is_upstream,
                reservation,
                decided,
            })),
            attempt,
            leave: attempt::leave::<ResB, S::Error>,
        }
    }
}

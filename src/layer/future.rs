//! One request through the layer, as a state machine: an answer of its own, or reading the body
//! for key parts, or deciding, then calling the inner service and settling by its status. The
//! request's pieces move from state to state in one box ([`Step`]), so a state change moves a
//! pointer.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response};
use tower::Service;

use super::body::{BoxError, RequestBody, ResponseBody};
use super::read::{check_head, Reading};
use super::{client_addr, Decided, MatchedRoute, OutcomeUnseen, Shared, Unmatched};
use crate::error::GatewayError;
use crate::key::{client_ip, KeySource};
use crate::limit::headers::{add_headers, too_many_requests};
use crate::limit::{Deciding, Limiter, RequestKeys, Reservation, Tier, Verdict};
use crate::metrics::DecisionLabel;
use crate::request_id::RequestId;
use crate::route::{admit, Route, RouteError};

pin_project_lite::pin_project! {
    /// The layer's response future.
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<RequestBody<B>>>,
    {
        #[pin]
        state: State<S, B>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<S, B>
    where
        S: Service<Request<RequestBody<B>>>,
    {
        Answer { response: Option<Response<axum::body::Body>>, decided: Option<Decided> },
        Reading { step: Option<Box<Step<S, B>>>, reading: Reading<B> },
        Deciding { step: Option<Box<Step<S, B>>>, deciding: Deciding },
        Calling { #[pin] future: S::Future, after: Option<Box<After>> },
    }
}

/// What a request carries from state to state.
struct Step<S, B> {
    inner: S,
    head: Parts,
    body: Option<RequestBody<B>>,
    route: Arc<Route>,
    limiter: Arc<Limiter>,
    request_id: RequestId,
    client_ip: IpAddr,
    keys: Option<Arc<RequestKeys>>,
    tier: Option<Arc<Tier>>,
}

/// What the response needs once the inner service answers: the verdict (for its headers),
/// the reservation to settle, and what the access log shows.
struct After {
    route: Arc<Route>,
    tier: Option<Arc<Tier>>,
    verdict: Verdict,
    reservation: Option<Reservation>,
    decided: Decided,
}

impl<S, B> State<S, B>
where
    S: Service<Request<RequestBody<B>>>,
{
    fn answer(response: Response<axum::body::Body>, decided: Decided) -> Self {
        State::Answer {
            response: Some(response),
            decided: Some(decided),
        }
    }
}

impl<S, B, ResB> ResponseFuture<S, B>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResB>>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    /// The route and the client first; then the body, the keys and the decision.
    pub(super) fn start(shared: &Shared, mut inner: S, req: Request<B>) -> Self {
        let (mut head, body) = req.into_parts();
        let request_id = head
            .extensions
            .get::<RequestId>()
            .cloned()
            .unwrap_or_else(RequestId::generate);
        let table = shared.table.load();
        let proxied_only = shared.unmatched == Unmatched::NotFound;
        let route = match admit(&table, &mut head, proxied_only) {
            Ok(route) => route.clone(),
            Err(RouteError::NoRoute { .. }) if shared.unmatched == Unmatched::PassThrough => {
                let future = inner.call(Request::from_parts(head, RequestBody::stream(body)));
                return Self::state(State::Calling {
                    future,
                    after: None,
                });
            }
            Err(e) => {
                let response = GatewayError::Route(e).into_response(&request_id);
                return Self::state(State::answer(response, Decided::default()));
            }
        };
        let server = &table.config.server;
        let peer = client_addr(&head.extensions);
        let client = client_ip(
            peer,
            &head.headers,
            &server.trusted_proxies,
            server.client_ip_header,
        );
        let body_timeout = server.header_read_timeout;
        drop(table);
        let mut step = Box::new(Step {
            inner,
            head,
            body: None,
            limiter: shared.limiter.clone(),
            route,
            request_id,
            client_ip: client,
            keys: None,
            tier: None,
        });
        let policy = &step.route.policy;
        if !policy.has_limits() || policy.exempts(client) {
            let label = match policy.has_limits() {
                true => DecisionLabel::Exempt,
                false => DecisionLabel::Allowed,
            };
            let verdict = step.limiter.uncounted(policy, label);
            step.body = Some(RequestBody::stream(body));
            return Self::state((*step).forward(verdict, None));
        }
        let config = &step.route.config;
        if config.reads_body() {
            let max = config.max_key_body_bytes;
            if let Err(e) = check_head(&step.head.headers, max) {
                return Self::state(step.refuse(e));
            }
            let reading = Reading::new(body, max, body_timeout);
            return Self::state(State::Reading {
                step: Some(step),
                reading,
            });
        }
        step.body = Some(RequestBody::stream(body));
        Self::state(step.decide())
    }

    fn state(state: State<S, B>) -> Self {
        ResponseFuture { state }
    }
}

impl<S, B> Step<S, B>
where
    S: Service<Request<RequestBody<B>>>,
{
    /// Derives the request's keys and its tier, and starts deciding (or refuses the request).
    fn decide(mut self: Box<Self>) -> State<S, B> {
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
        let deciding = Deciding::new(
            self.limiter.clone(),
            self.route.policy.clone(),
            tier.clone(),
            keys.clone(),
            1,
        );
        self.keys = Some(keys);
        self.tier = Some(tier);
        State::Deciding {
            step: Some(self),
            deciding,
        }
    }

    /// The gateway's own answer to a request it refuses for what the client sent (counted as
    /// `bad_request`) or could not read.
    fn refuse(&self, error: GatewayError) -> State<S, B> {
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
    fn conclude(self, verdict: Verdict) -> State<S, B> {
        if verdict.forwards() {
            let reservation = match (&self.tier, &self.keys) {
                (Some(tier), Some(keys)) => {
                    Reservation::of(&self.limiter, &self.route.policy, tier, keys, &verdict)
                }
                _ => None,
            };
            return self.forward(verdict, reservation);
        }
        let decided = self.decided(Some(&verdict));
        let response = match (&verdict.decision, &self.tier) {
            (Some(d), Some(tier)) => {
                let config = &self.route.config;
                too_many_requests(&config.name, tier, d, &self.request_id, config.headers)
            }
            _ => GatewayError::StoreUnavailable.into_response(&self.request_id),
        };
        State::answer(response, decided)
    }

    /// Calls the inner service with the request, the matched route in its extensions.
    fn forward(self, verdict: Verdict, reservation: Option<Reservation>) -> State<S, B> {
        let decided = self.decided(Some(&verdict));
        let Step {
            mut inner,
            mut head,
            body,
            route,
            client_ip,
            tier,
            ..
        } = self;
        head.extensions.insert(MatchedRoute {
            route: route.clone(),
            client_ip,
        });
        let body = body.expect("the body is there once decided");
        let future = inner.call(Request::from_parts(head, body));
        State::Calling {
            future,
            after: Some(Box::new(After {
                route,
                tier,
                verdict,
                reservation,
                decided,
            })),
        }
    }

    /// What the access log shows of this request.
    fn decided(&self, verdict: Option<&Verdict>) -> Decided {
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

impl After {
    /// The inner service's answer with the rate-limit headers (showing the settlement of its
    /// reservation) and what was decided.
    fn finish<ResB>(mut self, response: Response<ResB>) -> Response<ResponseBody<ResB>> {
        let status = response.status().as_u16();
        let unseen = response.extensions().get::<OutcomeUnseen>().is_some();
        let mut response = response.map(ResponseBody::inner);
        let mut decision = self.verdict.decision.take();
        match self.reservation.take() {
            Some(reservation) if unseen => reservation.keep(),
            Some(reservation) => {
                let settled = reservation.settle(status);
                if let Some(d) = &mut decision {
                    settled.apply(d);
                }
            }
            None => {}
        }
        if let (true, Some(d), Some(tier)) = (self.route.config.headers, &decision, &self.tier) {
            add_headers(response.headers_mut(), tier, d);
        }
        response.extensions_mut().insert(self.decided);
        response
    }
}

impl<S, B, ResB> Future for ResponseFuture<S, B>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResB>>,
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Output = Result<Response<ResponseBody<ResB>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let next = match this.state.as_mut().project() {
                StateProj::Answer { response, decided } => {
                    let mut response = response
                        .take()
                        .expect("an answer is not polled after it is ready")
                        .map(ResponseBody::own);
                    if let Some(decided) = decided.take() {
                        response.extensions_mut().insert(decided);
                    }
                    return Poll::Ready(Ok(response));
                }
                StateProj::Reading { step, reading } => {
                    let read = std::task::ready!(reading.poll_read(cx));
                    let mut step = step.take().expect("reading has its step");
                    match read {
                        Ok(bytes) => {
                            step.body = Some(RequestBody::buffered(bytes));
                            step.decide()
                        }
                        Err(e) => step.refuse(e),
                    }
                }
                StateProj::Deciding { step, deciding } => {
                    let verdict = std::task::ready!(Pin::new(deciding).poll(cx));
                    step.take()
                        .expect("deciding has its step")
                        .conclude(verdict)
                }
                StateProj::Calling { future, after } => {
                    let response = std::task::ready!(future.poll(cx))?;
                    return Poll::Ready(Ok(match after.take() {
                        Some(after) => after.finish(response),
                        None => response.map(ResponseBody::inner),
                    }));
                }
            };
            this.state.set(next);
        }
    }
}

//! One request through the layer, as a state machine: an answer of its own, or reading the body
//! for key parts, or deciding, then calling the inner service and settling by its status. The
//! request's pieces move from state to state in one box ([`Step`], `state.rs`), so a state
//! change moves a pointer. A future dropped before its answer (the client left) ends as
//! [`super::attempt`] says: a forwarded attempt the upstream may have seen is carried to its
//! answer.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use tower::Service;

use super::attempt::{Departed, Finished, OnDeparted};
use super::body::{BoxError, RequestBody, ResponseBody};
use super::extensions::{arriving_id, client_addr, BodyCutShort, Decided};
use super::read::{start_reading, Reading};
use super::shared::{Shared, Unmatched};
use super::state::{State, StateProj, Step};
use crate::connection::removes_meaning;
use crate::error::GatewayError;
use crate::key::client_ip;
use crate::metrics::DecisionLabel;
use crate::route::{admit, RouteError};

pin_project_lite::pin_project! {
    /// The layer's response future. Dropped before its answer, it ends as
    /// [`ResponseFuture::client_left`] says.
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<RequestBody<B>>>,
    {
        #[pin]
        state: State<S, B>,
    }

    impl<S, B> PinnedDrop for ResponseFuture<S, B>
    where
        S: Service<Request<RequestBody<B>>>,
    {
        fn drop(this: Pin<&mut Self>) {
            this.client_left(None);
        }
    }
}

impl<S, B, ResB> ResponseFuture<S, B>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResB>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    ResB: http_body::Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    /// The route and the client first; then the body, the keys and the decision.
    pub(super) fn start(shared: &Shared, mut inner: S, req: Request<B>) -> Self {
        let (mut head, body) = req.into_parts();
        let table = shared.table.load();
        let server = &table.config.server;
        let peer =
            client_addr(&head.extensions).unwrap_or_else(|| shared.forwarding_warned.no_address());
        let request_id = arriving_id(&head, peer, &server.trusted_proxies);
        let proxy = shared.unmatched == Unmatched::NotFound;
        let route = match admit(&table, &mut head, proxy) {
            Ok(route) => route.clone(),
            Err(RouteError::NoRoute { .. }) if shared.unmatched == Unmatched::PassThrough => {
                let future = inner.call(Request::from_parts(head, RequestBody::stream(body)));
                return Self::state(State::Calling { future });
            }
            Err(e) => {
                let response = GatewayError::Route(e).into_response(&request_id);
                return Self::state(State::answer(response, Decided::default()));
            }
        };
        let server = &table.config.server;
        shared
            .forwarding_warned
            .check(peer, &head.headers, &server.trusted_proxies);
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
            inner_is_upstream: shared.inner_is_upstream,
        });
        let policy = &step.route.policy;
        if let Some(header) = removes_meaning(&step.head.headers, &policy.guarded_headers) {
            let header = header.to_string();
            return Self::state(step.refuse(GatewayError::ConnectionRemoves { header }));
        }
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
        // A body cut short is not read: its key parts are missing (decided below, unread).
        if config.reads_body() && step.head.extensions.get::<BodyCutShort>().is_none() {
            let max = config.max_key_body_bytes;
            if let Err(e) = start_reading(&mut step.head.headers, max) {
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

impl<S, B> ResponseFuture<S, B>
where
    S: Service<Request<RequestBody<B>>>,
{
    /// The client left before the answer (hyper drops the future then; dropping calls this
    /// with no `then`). A forwarded attempt the upstream may have seen is carried on to its
    /// answer in a task of its own and settled by its status; one it never saw is refunded at
    /// once, as is a decision still being made (`Deciding` finishes it). `then` hears what
    /// became of the request, once: at once, or when the carried-on answer is in.
    pub fn client_left(self: Pin<&mut Self>, then: Option<OnDeparted>) {
        let mut state = self.project().state;
        let decided = match state.as_mut().project() {
            StateProj::Done => return,
            StateProj::Forwarding {
                call,
                settling,
                attempt,
                leave,
            } => {
                if let (Some(call), Some(settling)) = (call.take(), settling.take()) {
                    leave(call, settling, attempt, then);
                }
                state.set(State::Done);
                return;
            }
            StateProj::Reading { step, .. } => {
                step.as_ref().map(|s| s.decided(None)).unwrap_or_default()
            }
            // one that waited for room was delayed, and the access line says so
            StateProj::Deciding { step, deciding } => step
                .as_ref()
                .map(|s| s.decided(deciding.waiting().as_ref()))
                .unwrap_or_default(),
            StateProj::Answer { decided, .. } => decided.take().unwrap_or_default(),
            StateProj::Calling { .. } => Decided::default(),
            StateProj::Recounting { recounting } => {
                let departed = recounting.take().map(|r| r.departed());
                state.set(State::Done);
                if let (Some(then), Some(departed)) = (then, departed) {
                    then(departed);
                }
                return;
            }
        };
        // Dropping a decision in flight hands it to a task that refunds its charge.
        state.set(State::Done);
        if let Some(then) = then {
            then(Departed {
                decided,
                answer: None,
            });
        }
    }
}

impl<S, B, ResB> Future for ResponseFuture<S, B>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResB>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
    ResB: http_body::Body<Data = Bytes> + Send + 'static,
    ResB::Error: Into<BoxError>,
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
                    this.state.set(State::Done);
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
                StateProj::Calling { future } => {
                    let answered = std::task::ready!(future.poll(cx));
                    this.state.set(State::Done);
                    return Poll::Ready(answered.map(|r| r.map(ResponseBody::inner)));
                }
                StateProj::Forwarding { call, settling, .. } => {
                    let polled = call.as_mut().expect("forwarding has its call");
                    // A call that panicked is dropped on the way out, never polled again by
                    // a client that leaves (its reservation, dropped unsettled, stays counted).
                    let poll = std::panic::AssertUnwindSafe(|| polled.as_mut().poll(cx));
                    let answered = match std::panic::catch_unwind(poll) {
                        Ok(poll) => std::task::ready!(poll),
                        Err(panic) => {
                            *call = None;
                            std::panic::resume_unwind(panic)
                        }
                    };
                    let settling = settling.take().expect("forwarding has its settling");
                    match answered.map(|r| settling.finish(r)) {
                        Ok(Finished::Recounting(recounting)) => State::Recounting {
                            recounting: Some(recounting),
                        },
                        Ok(Finished::Ready(response)) => {
                            this.state.set(State::Done);
                            return Poll::Ready(Ok(response));
                        }
                        Err(e) => {
                            this.state.set(State::Done);
                            return Poll::Ready(Err(e));
                        }
                    }
                }
                StateProj::Recounting { recounting } => {
                    let waiting = recounting.as_mut().expect("recounting has its answer");
                    let response = std::task::ready!(waiting.poll_answer(cx));
                    this.state.set(State::Done);
                    return Poll::Ready(Ok(response.map(ResponseBody::own)));
                }
                StateProj::Done => panic!("the layer's future polled after it finished"),
            };
            this.state.set(next);
        }
    }
}

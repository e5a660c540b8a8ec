//! The request path, one step after the other: route ([`crate::route::admit`]) -> key and
//! limiter ([`crate::limit::check`]) -> proxy ([`crate::proxy::forward`]), then `X-Request-Id`
//! on the answer and the access log line. Each step hands the next its result as arguments.
//!
//! Differences from a stack of tower layers (one per step): one future per request instead of
//! one boxed future per layer, and no type-keyed request extensions to pass results along, each
//! of which is a heap allocation. [`Gateway`] is still a tower `Service` for whoever wants to
//! embed the whole request path.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use arc_swap::ArcSwap;
use axum::body::Body;
use http::{Request, Response};
use hyper::body::Incoming;

use crate::access_log::{self, AccessEntry};
use crate::key::{client_ip, is_trusted};
use crate::limit::{check, Limiter};
use crate::proxy::{forward, Peer};
use crate::request_id::{RequestId, X_REQUEST_ID};
use crate::route::{admit, RouteTable};

/// The whole request path of one gateway: the route table in force and the limiter.
#[derive(Clone)]
pub struct Gateway {
    table: Arc<ArcSwap<RouteTable>>,
    limiter: Arc<Limiter>,
}

impl Gateway {
    /// A gateway routing with the table in force in `table` (swapped on reload).
    pub fn new(table: Arc<ArcSwap<RouteTable>>, limiter: Arc<Limiter>) -> Gateway {
        Gateway { table, limiter }
    }

    /// Answers one request from `peer` (the connection's address, its header value rendered once).
    pub async fn handle(&self, peer: &Peer, req: Request<Incoming>) -> Response<Body> {
        let started = Instant::now();
        let table = self.table.load_full();
        let server = &table.config.server;
        let peer = Peer {
            trusted: is_trusted(peer.ip, &server.trusted_proxies),
            ..peer.clone()
        };
        let request_id = RequestId::for_request(req.headers(), peer.trusted);
        let (mut head, body) = req.into_parts();
        let method = head.method.clone();
        let sent_path = access_log::enabled().then(|| head.uri.path().to_string());

        let mut entry = AccessEntry::new(&request_id, &method, sent_path.as_deref());
        let route = match admit(&table, &mut head) {
            Ok(route) => route.clone(),
            Err(e) => return finish(e.into_response(&request_id), &request_id, entry, started),
        };
        entry.route(&route.config);
        let client = client_ip(peer.ip, &head.headers, &server.trusted_proxies);
        drop(table);
        let checked = match check(&self.limiter, &route.policy, &head, client).await {
            Ok(c) => c,
            Err(missing) => {
                let response = crate::error::GatewayError::from(missing).into_response(&request_id);
                return finish(response, &request_id, entry, started);
            }
        };
        let logged_key = checked.logged_key().map(|k| k.into_owned());
        entry.decided(
            checked.verdict.label,
            checked.limit_name(&route.policy),
            logged_key.as_deref(),
        );
        let response = if checked.forwards() {
            let req = Request::from_parts(head, body);
            let (mut response, outcome) =
                forward(&route.upstream, &route.metrics, req, &peer, &request_id).await;
            checked.add_headers(&route.policy, &mut response);
            entry.upstream(outcome);
            response
        } else {
            checked.answer(&route.policy, &request_id)
        };
        finish(response, &request_id, entry, started)
    }
}

/// Returns the request id and writes the access log line.
fn finish(
    mut response: Response<Body>,
    request_id: &RequestId,
    entry: AccessEntry<'_>,
    started: Instant,
) -> Response<Body> {
    response
        .headers_mut()
        .insert(X_REQUEST_ID.clone(), request_id.header_value().clone());
    entry.write(response.status().as_u16(), started.elapsed());
    response
}

/// [`Gateway`] as a tower service for one connection from `peer`.
#[derive(Clone)]
pub struct GatewayService {
    gateway: Gateway,
    peer: Arc<Peer>,
}

impl GatewayService {
    /// The service for a connection from `peer`.
    pub fn new(gateway: Gateway, peer: SocketAddr) -> GatewayService {
        GatewayService {
            gateway,
            peer: Arc::new(Peer::new(peer.ip())),
        }
    }
}

impl tower::Service<Request<Incoming>> for GatewayService {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(this.gateway.handle(&this.peer, req).await) })
    }
}

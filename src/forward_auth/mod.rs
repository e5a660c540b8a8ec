//! Forward auth: answers the subrequests of a proxy that asks before it forwards (NGINX
//! `auth_request`, Caddy `forward_auth`, Traefik `ForwardAuth`). The original request (method
//! and URI from the proxy's headers, [`original`]; the body when the proxy sends it) is asked
//! of the layer as the traffic path would decide it ([`Asker`]).
//!
//! ```text
//! subrequest -> request id -> original request -> RateLimit (route, keys, limits) -> 200
//!            -> 200 with the rate-limit headers | 429 (or 403) with Retry-After, headers, body
//! ```
//!
//! A request no route takes is allowed (200, nothing counted): the proxy asks about every
//! request. The client IP is the forwarding header's when the proxy is a trusted peer, else the
//! proxy's own address (every client one key: set `server.trusted_proxies`). A subrequest with
//! a body (Traefik's `forwardBody: true`, or any with a `Content-Length`) carries the original
//! body: body key parts read it as on the traffic path, within `max_key_body_bytes`.

mod original;

use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tower::Service;

pub use crate::error::OriginalError;

use crate::error::GatewayError;
use crate::key::is_trusted;
use crate::layer::{Asker, ClientAddr, ResponseBody, Shared};
use crate::request_id::{RequestId, X_REQUEST_ID};

/// The forward-auth listener's request path: the gateway's route table and limiter.
#[derive(Clone)]
pub struct ForwardAuth {
    asker: Asker,
}

impl ForwardAuth {
    /// Forward auth deciding with the route table and limiter of `gateway` (the traffic
    /// path's): every route takes its requests, and one no route takes is allowed.
    pub fn new(gateway: &Shared) -> ForwardAuth {
        ForwardAuth {
            asker: Asker::new(gateway),
        }
    }

    /// The service for one connection from `peer` (the proxy in front).
    pub fn service(&self, peer: IpAddr) -> ForwardAuthService {
        ForwardAuthService {
            asker: self.asker.clone(),
            peer,
        }
    }
}

/// Forward auth for one connection.
#[derive(Clone)]
pub struct ForwardAuthService {
    asker: Asker,
    peer: IpAddr,
}

type Answer = Response<ResponseBody<Body>>;

impl Service<Request<Incoming>> for ForwardAuthService {
    type Response = Answer;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        let started = Instant::now();
        let (trusted, refused_status) = {
            let table = self.asker.shared().table.load();
            let config = &table.config;
            (
                is_trusted(self.peer, &config.server.trusted_proxies),
                config
                    .forward_auth
                    .as_ref()
                    .map_or(429, |f| f.refused_status),
            )
        };
        let request_id = RequestId::for_request(req.headers(), trusted);
        let (head, body) = req.into_parts();
        let (method, uri) = (head.method.clone(), head.uri.clone());
        let asked = original::original(&head, body);
        let (method, uri) = match &asked {
            Ok(r) => (r.method().clone(), r.uri().clone()),
            Err(_) => (method, uri),
        };
        let answer = match asked {
            Ok(mut asked) => {
                let extensions = asked.extensions_mut();
                extensions.insert(request_id.clone());
                extensions.insert(ClientAddr(self.peer));
                Ok(self.asker.ask(asked))
            }
            Err(e) => Err(GatewayError::from(e).into_response(&request_id)),
        };
        Box::pin(async move {
            let mut response = match answer {
                Ok(deciding) => {
                    let Ok(response) = deciding.await;
                    refusal_as(response, refused_status).await
                }
                Err(refused) => refused.map(ResponseBody::own),
            };
            response
                .headers_mut()
                .insert(X_REQUEST_ID.clone(), request_id.header_value().clone());
            if crate::access_log::enabled() {
                let elapsed = started.elapsed();
                crate::layer::answered(&response).write(&method, uri.path(), &request_id, elapsed);
            }
            Ok(response)
        })
    }
}

/// A 429 given the configured refusal status: with 403 (for NGINX), the same headers and
/// problem body, its `status` member saying 403.
async fn refusal_as(response: Answer, status: u16) -> Answer {
    if response.status() != StatusCode::TOO_MANY_REQUESTS || status == 429 {
        return response;
    }
    let (mut head, body) = response.into_parts();
    head.status = StatusCode::FORBIDDEN;
    let bytes = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let text = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(mut problem) => {
            problem["status"] = 403.into();
            problem.to_string()
        }
        Err(_) => String::from_utf8_lossy(&bytes).into_owned(),
    };
    head.headers.remove(http::header::CONTENT_LENGTH);
    Response::from_parts(head, ResponseBody::own(Body::from(text)))
}

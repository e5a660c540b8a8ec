//! Envoy's external authorization API: `envoy.service.auth.v3.Authorization/Check`, which
//! Envoy's `ext_authz` filter (and Istio's `CUSTOM` authorization, Envoy Gateway's `extAuth`)
//! calls before it forwards a request. It decides the TOML's HTTP routes, not the rate-limit
//! service's descriptors: the request Envoy describes (with its body, when Envoy sends it) is
//! asked of the layer exactly as the traffic path would decide it ([`Asker`]), so the limiter,
//! store, deny cache, metrics, access log and admin API are the traffic path's.
//!
//! ```text
//! CheckRequest -> request (method, path, host, headers, body; source address)
//!   -> first decision of this request? (repeats) -> Asker: route -> keys -> limits
//!   -> OK + rate-limit headers | PERMISSION_DENIED + the traffic path's 429 (or 400, 503)
//! ```

mod answer;
mod repeats;
mod request;
mod wire;

use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::service::auth::v3::{CheckRequest, CheckResponse};

pub use repeats::{FirstDecisions, RequestIdentity, KEPT_FOR, MAX_KEPT};
pub use request::PARTIAL_BODY;
pub use wire::ReadCheck;

use crate::error::GatewayError;
use crate::grpc_unary::{BoxFuture, UnaryMethod, UnaryServer};
use crate::layer::{AnswerBy, Asker, ClientAddr, ResponseBody, Shared};
use crate::request_id::{RequestId, X_REQUEST_ID};

/// The largest `CheckRequest` taken, in bytes: a body of the largest `max_key_body_bytes`
/// (16 MiB) and the request's head.
pub const MAX_MESSAGE_BYTES: usize = 17 << 20;

/// `Check`, answered by the gateway's route table and limiter.
#[derive(Clone)]
pub struct ExtAuthzService {
    asker: Asker,
    first: Arc<FirstDecisions>,
}

impl ExtAuthzService {
    /// The service deciding with the route table and limiter of `gateway` (the traffic
    /// path's).
    pub fn new(gateway: &Shared) -> ExtAuthzService {
        ExtAuthzService {
            asker: Asker::new(gateway),
            first: Arc::new(FirstDecisions::default()),
        }
    }

    /// The service as a gRPC server (a tower service a connection serves), its requests read
    /// with their strings as bytes ([`ReadCheck`]).
    pub fn server(self) -> UnaryServer<ExtAuthzService> {
        UnaryServer::new(self)
    }

    /// The answer to `read`, for a caller that stops waiting at `answer_by` (a delay route
    /// waits no longer): the first decision's when the request was asked about already.
    pub async fn answer(&self, read: &ReadCheck, answer_by: Option<Instant>) -> CheckResponse {
        match RequestIdentity::of(read) {
            // boxed: the repeats' cell holds the decision's future, which is then moved by
            // pointer, not copied whole at each await it passes through
            Some(identity) => {
                let decide = Box::pin(self.decide(&read.check, answer_by));
                self.first.answer(identity, decide).await
            }
            None => self.decide(&read.check, answer_by).await,
        }
    }

    /// Decides the request `check` asks about, as the traffic path would.
    async fn decide(&self, check: &CheckRequest, answer_by: Option<Instant>) -> CheckResponse {
        let started = Instant::now();
        let asked = request::asked(check);
        let headers = asked.as_ref().map(|a| a.request.headers());
        // Envoy writes (or keeps, when told to) the request's X-Request-Id: it is the hop the
        // id is kept from, as a trusted proxy's is on the traffic path.
        let request_id = match headers {
            Ok(headers) => RequestId::for_request(headers, true),
            Err(_) => RequestId::generate(),
        };
        let http = check
            .attributes
            .as_ref()
            .and_then(|a| a.request.as_ref())
            .and_then(|r| r.http.as_ref());
        let method = http.map_or("", |h| h.method.as_str()).to_string();
        let mut response = match asked {
            Ok(mut asked) => {
                let extensions = asked.request.extensions_mut();
                extensions.insert(request_id.clone());
                extensions.insert(ClientAddr(asked.source));
                if let Some(by) = answer_by {
                    extensions.insert(AnswerBy(by));
                }
                let Ok(response) = self.asker.ask(asked.request).await;
                response
            }
            Err(e) => GatewayError::from(e)
                .into_response(&request_id)
                .map(ResponseBody::own),
        };
        if !response.status().is_success() {
            response
                .headers_mut()
                .insert(X_REQUEST_ID.clone(), request_id.header_value().clone());
        }
        if crate::access_log::enabled() {
            let method = http::Method::from_bytes(method.as_bytes()).unwrap_or_default();
            let path = http.map_or("", |h| h.path.split('?').next().unwrap_or(""));
            let elapsed = started.elapsed();
            crate::layer::answered(&response).write(&method, path, &request_id, elapsed);
        }
        answer::check_response(response).await
    }
}

impl UnaryMethod for ExtAuthzService {
    const SERVICE: &'static str = "envoy.service.auth.v3.Authorization";
    const PATH: &'static str = "/envoy.service.auth.v3.Authorization/Check";
    const MAX_MESSAGE_BYTES: usize = MAX_MESSAGE_BYTES;
    type Request = ReadCheck;
    type Response = CheckResponse;

    fn respond(
        self: Arc<Self>,
        read: ReadCheck,
        answer_by: Option<Instant>,
    ) -> BoxFuture<Result<CheckResponse, tonic::Status>> {
        Box::pin(async move { Ok(self.answer(&read, answer_by).await) })
    }
}

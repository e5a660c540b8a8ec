//! [`RlsService`]: the gRPC service Envoy's `rate_limit_service` calls. Each call reads the
//! table in force once, answers a request it cannot take with a gRPC status (the mapping is
//! `crate::error`'s), and counts its handling time in `slidegate_rls_duration_seconds` (the
//! decision's latency as Envoy sees it, whose default timeout for the call is 20 ms).
//!
//! It is served by [`RlsServer`] rather than the generated server, whose codec refuses a
//! request with a descriptor value that is not UTF-8 (`wire.rs` says why that matters).

use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::server::{Grpc, NamedService, UnaryService};

use super::request::{check, plan, RlsError};
use super::table::RlsTable;
use super::wire::RequestCodec;
use super::{answer, decide};
use crate::limit::Limiter;

/// The largest request message, in bytes: above Envoy's largest request head (8 MiB, whose
/// headers and path its actions copy into descriptor values), so that no value Envoy can send
/// is turned into an error.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// `ShouldRateLimit`, answered with the table in force and the gateway's limiter.
#[derive(Clone)]
pub struct RlsService {
    table: Arc<ArcSwap<RlsTable>>,
    limiter: Arc<Limiter>,
}

impl RlsService {
    /// A service deciding with the table in `table` (swapped on reload) on `limiter`.
    pub fn new(table: Arc<ArcSwap<RlsTable>>, limiter: Arc<Limiter>) -> RlsService {
        RlsService { table, limiter }
    }

    /// The service as a gRPC server (a tower service a connection serves).
    pub fn server(self) -> RlsServer {
        RlsServer(Arc::new(self))
    }

    /// The answer to one request.
    pub async fn answer(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, RlsError> {
        check(request)?;
        let table = self.table.load_full();
        let Some(domain) = table.domain(&request.domain) else {
            return Ok(answer::unknown_domain(request.descriptors.len()));
        };
        let plan = plan(domain, request);
        let outcome = decide::decide(&self.limiter, domain, &plan).await;
        Ok(answer::response(&plan, &outcome, table.headers))
    }
}

/// `ShouldRateLimit` served over gRPC: its request read by [`RequestCodec`], any other method
/// `UNIMPLEMENTED`.
#[derive(Clone)]
pub struct RlsServer(Arc<RlsService>);

/// The one method's path.
const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

impl NamedService for RlsServer {
    const NAME: &'static str = "envoy.service.ratelimit.v3.RateLimitService";
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl tower::Service<http::Request<tonic::body::Body>> for RlsServer {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        if request.uri().path() != SHOULD_RATE_LIMIT {
            let status = tonic::Status::unimplemented("no such method");
            return Box::pin(std::future::ready(Ok(status.into_http())));
        }
        let service = self.clone();
        Box::pin(async move {
            let mut grpc = Grpc::new(RequestCodec)
                .apply_max_message_size_config(Some(MAX_MESSAGE_BYTES), None);
            Ok(grpc.unary(service, request).await)
        })
    }
}

impl UnaryService<RateLimitRequest> for RlsServer {
    type Response = RateLimitResponse;
    type Future = BoxFuture<Result<tonic::Response<RateLimitResponse>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<RateLimitRequest>) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move {
            let started = Instant::now();
            let request = request.into_inner();
            let answer = service.answer(&request).await;
            (service.table.load()).observe(&request.domain, started.elapsed());
            answer
                .map(tonic::Response::new)
                .map_err(tonic::Status::from)
        })
    }
}

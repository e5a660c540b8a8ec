//! [`RlsService`]: the gRPC service Envoy's `rate_limit_service` calls. Each call reads the
//! table in force once, answers a request it cannot take with a gRPC status (the mapping is
//! `crate::error`'s), and counts its handling time in `slidegate_rls_duration_seconds` (the
//! decision's latency as Envoy sees it, whose default timeout for the call is 20 ms).
//!
//! It is served as a [`UnaryMethod`] rather than by the generated server, whose codec refuses a
//! request with a descriptor value that is not UTF-8 (`wire.rs` reads it).

use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

use super::request::{check, plan, RlsError};
use super::table::RlsTable;
use super::{answer, decide};
use crate::grpc_unary::{BoxFuture, UnaryMethod, UnaryServer};
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
    pub fn server(self) -> UnaryServer<RlsService> {
        UnaryServer::new(self)
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

impl UnaryMethod for RlsService {
    const SERVICE: &'static str = "envoy.service.ratelimit.v3.RateLimitService";
    const PATH: &'static str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
    const MAX_MESSAGE_BYTES: usize = MAX_MESSAGE_BYTES;
    type Request = RateLimitRequest;
    type Response = RateLimitResponse;

    /// The rate-limit service never delays: the caller's deadline changes nothing.
    fn respond(
        self: Arc<Self>,
        request: RateLimitRequest,
        _answer_by: Option<Instant>,
    ) -> BoxFuture<Result<RateLimitResponse, tonic::Status>> {
        Box::pin(async move {
            let started = Instant::now();
            let answer = self.answer(&request).await;
            (self.table.load()).observe(&request.domain, started.elapsed());
            answer.map_err(tonic::Status::from)
        })
    }
}

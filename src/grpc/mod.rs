//! The gRPC listeners: Envoy's rate-limit service (`[rls]`) and external authorization
//! (`[ext_authz]`), each on its own address or both on one (one server then serves both),
//! with the standard health (`grpc.health.v1.Health`) and reflection
//! (`grpc.reflection.v1.ServerReflection`, and `v1alpha` for older clients) services beside
//! them, so that `grpcurl` and Kubernetes' gRPC probes work without proto files. Every request
//! must arrive whole within `server.header_read_timeout` ([`deadline`]).

mod deadline;

use std::net::SocketAddr;
use std::time::Duration;

use tonic::service::Routes;

pub use deadline::{Deadline, TooSlow, WithDeadline};

use crate::ext_authz::ExtAuthzService;
use crate::grpc_unary::UnaryMethod;
use crate::rls::RlsService;

/// The descriptor set of the services served, for reflection (built from `proto/`).
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/services.bin"));

/// The gRPC service names, as health checks and reflection name them.
pub const RLS_SERVICE: &str = <RlsService as UnaryMethod>::SERVICE;
/// See [`RLS_SERVICE`].
pub const EXT_AUTHZ_SERVICE: &str = <ExtAuthzService as UnaryMethod>::SERVICE;
/// See [`RLS_SERVICE`].
pub const HEALTH_SERVICE: &str = "grpc.health.v1.Health";

/// One gRPC listener: its address and the services it serves.
pub struct Listener {
    /// Where it listens.
    pub listen: SocketAddr,
    /// `ShouldRateLimit`, when `[rls] listen` is this address.
    pub rls: Option<RlsService>,
    /// `Check`, when `[ext_authz] listen` is this address.
    pub ext_authz: Option<ExtAuthzService>,
}

/// The gRPC listeners of the given services: one per address (`[rls]` and `[ext_authz]` on one
/// address make one listener serving both).
pub fn listeners(
    rls: Option<(SocketAddr, RlsService)>,
    ext_authz: Option<(SocketAddr, ExtAuthzService)>,
) -> Vec<Listener> {
    let mut out: Vec<Listener> = Vec::new();
    if let Some((listen, service)) = rls {
        out.push(Listener {
            listen,
            rls: Some(service),
            ext_authz: None,
        });
    }
    if let Some((listen, service)) = ext_authz {
        match out.iter_mut().find(|l| l.listen == listen) {
            Some(shared) => shared.ext_authz = Some(service),
            None => out.push(Listener {
                listen,
                rls: None,
                ext_authz: Some(service),
            }),
        }
    }
    out
}

impl Listener {
    /// The services of this listener as one router, with health and reflection, each request
    /// bounded by `timeout` (`server.header_read_timeout`).
    pub async fn router(self, timeout: Duration) -> WithDeadline<Routes> {
        let (reporter, health) = tonic_health::server::health_reporter();
        let mut routes = Routes::new(health);
        let mut names = Vec::new();
        if let Some(rls) = self.rls {
            routes = routes.add_service(rls.server());
            names.push(RLS_SERVICE);
        }
        if let Some(ext_authz) = self.ext_authz {
            routes = routes.add_service(ext_authz.server());
            names.push(EXT_AUTHZ_SERVICE);
        }
        for name in names.iter().chain(&[""]) {
            reporter
                .set_service_status(*name, tonic_health::ServingStatus::Serving)
                .await;
        }
        // Reflection lists what this listener serves: its services and health.
        let reflection = |builder: tonic_reflection::server::Builder<'static>| {
            let builder = builder
                .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
                .with_service_name(HEALTH_SERVICE);
            names
                .iter()
                .fold(builder, |b, name| b.with_service_name(*name))
        };
        let v1 = reflection(tonic_reflection::server::Builder::configure()).build_v1();
        let v1alpha = reflection(tonic_reflection::server::Builder::configure()).build_v1alpha();
        if let (Ok(v1), Ok(v1alpha)) = (v1, v1alpha) {
            routes = routes.add_service(v1).add_service(v1alpha);
        } else {
            tracing::warn!("gRPC reflection is off: its descriptor set did not load");
        }
        WithDeadline::new(routes.prepare(), timeout)
    }
}

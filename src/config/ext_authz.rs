//! `[ext_authz]`, validated: where Envoy's external authorization API
//! (`envoy.service.auth.v3.Authorization/Check`) is served. It decides the TOML's HTTP routes,
//! so the section holds only its address, which may be `[rls] listen` (one gRPC server then
//! serves both).

use std::net::SocketAddr;

/// `[ext_authz]`
#[derive(Debug, Clone, PartialEq)]
pub struct ExtAuthzConfig {
    /// Where `Check` is served (gRPC, HTTP/2 cleartext).
    pub listen: SocketAddr,
}

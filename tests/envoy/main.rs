//! Deciding for the proxies in front, as one test binary: Envoy's rate-limit service and
//! ext_authz, the gRPC listeners, and forward auth.

#[path = "../support/mod.rs"]
mod support;

mod ext_authz;
mod ext_authz_delay;
mod ext_authz_headers;
mod forward_auth;
mod forward_auth_body;
mod grpc_listeners;
mod rls_admin_values;
mod rls_bad_input;
mod rls_decisions;
mod rls_matching;
mod rls_never_unlimited;
mod rls_ratelimit_fixtures;
mod rls_ratelimit_readme;

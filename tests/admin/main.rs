//! The admin listener's suites as one test binary: health and auth, reload, usage, lookups by
//! value, who is refused now, batch decisions, and what `/metrics` and the access log say.

#[path = "../support/mod.rs"]
mod support;

mod access_log;
mod admin_batch;
mod admin_blocked;
mod admin_blocked_every_route;
mod admin_blocked_slow_store;
mod admin_health_and_auth;
mod admin_lookup_by_value;
mod admin_reload;
mod admin_reset_cluster_node_down;
mod admin_usage;
mod metrics;
mod request_ids;

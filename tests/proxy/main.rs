//! The traffic path's suites as one test binary: routing, forwarding headers, streaming, the
//! upstream's errors and connections, rate-limit headers, and costs read from answers.

#[path = "../support/mod.rs"]
mod support;

mod answer_costs;
mod answer_costs_streaming;
mod proxy_client_ip;
mod proxy_forwarding;
mod proxy_joined_chunks;
mod proxy_missing_keys;
mod proxy_rate_limit_headers;
mod proxy_response_framing;
mod proxy_routing;
mod proxy_streaming;
mod proxy_upstream_errors;
mod upstream_connects;
mod upstream_keep_alive;

//! Hostile and malformed input as one test binary: raw-socket requests, heads and framing,
//! connections, configs and matching, and the problem bodies they get.

#[path = "../support/mod.rs"]
mod support;

mod errors;
mod fuzz_heads;
mod hardening_connection_header;
mod hardening_connections;
mod hardening_framing;
mod hardening_heads;
mod hostile_config;
mod hostile_connections;
mod hostile_headers;
mod hostile_matching;
mod hostile_state;
mod path_normalisation;

#![warn(missing_docs)]
//! slidegate: an HTTP reverse proxy that enforces exact sliding-window rate limits shared by
//! every gateway instance, because each decision runs atomically as a Lua script in Redis.
//!
//! The request path, outermost first:
//!
//! ```text
//! accept (app) -> RateLimit (limit::service)
//!                   route match (runtime) -> key (key::derive_key, key::client_ip)
//!                   -> deny cache (limit::deny_cache) -> decision (limit::Store: Redis EVALSHA | memory)
//!                   -> allowed: Proxy (proxy) -> upstream, response streamed back + rate-limit headers
//!                   -> over:    429 (limit::response) | delay | block | shadow
//! ```
//!
//! The admin listener (`admin`) serves metrics, health, usage, reload and batch decisions.

pub mod admin;
pub mod app;
pub mod config;
pub mod error;
pub mod key;
pub mod limit;
pub mod metrics;
pub mod proxy;
pub mod route;
pub mod runtime;
pub mod state;

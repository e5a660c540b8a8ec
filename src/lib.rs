#![warn(missing_docs)]
//! slidegate: an HTTP reverse proxy that enforces exact sliding-window rate limits shared by
//! every gateway instance, because each decision runs atomically as a Lua script in Redis.
//!
//! The request path, outermost first; data flows one way, each step handing the next what it
//! needs as a request extension:
//!
//! ```text
//! accept (server) -> route (route: normalise the path, match, request id, access log)
//!   -> key (key: client IP behind trusted proxies, header, query, verified JWT claim, ...)
//!   -> limiter (limit: deny cache -> store: Redis script, coalesced per node | memory;
//!               on_error; reject | delay | block | shadow; metrics)
//!   -> proxy (proxy: upstream, streamed both ways) -> response + rate-limit headers
//! ```
//!
//! The admin listener (`admin`) serves metrics, health, usage, reload and the batch decision
//! API, which calls the same limiter as the proxy path.

pub mod access_log;
pub mod admin;
pub mod algorithm;
pub mod app;
pub mod campaign;
pub mod config;
pub mod error;
pub mod gateway;
pub mod key;
pub mod layer;
pub mod limit;
pub mod logging;
pub mod metrics;
pub mod proxy;
pub mod request_id;
pub mod route;
pub mod server;
pub mod state;
pub mod store;
pub mod tier;
pub mod workers;

pub use layer::RateLimitLayer;

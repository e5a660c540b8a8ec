//! The metrics of the README's "Metrics", registered once into a `prometheus::Registry`. Label values
//! come only from config names and fixed enums, never from client input, so cardinality is
//! bounded by the config. Per-route handles are resolved when a config is loaded
//! ([`RouteMetrics`]), so the hot path does no label lookups; a reload that removes a route
//! drops its series ([`Metrics::forget_route`]).

mod label;
mod process;
mod registry;
mod route;

pub use label::{DecisionLabel, EXCEED_MODES, STORE_ERROR_KINDS, UPSTREAM_STATUSES};
pub use registry::Metrics;
pub use route::{DecisionDuration, RouteMetrics};

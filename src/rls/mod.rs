//! Envoy's rate-limit service: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`
//! over gRPC (HTTP/2 cleartext), deciding with the limits of envoyproxy/ratelimit's YAML files
//! (`[rls] config`) on the same limiter, store, deny cache and metrics as the traffic path.
//!
//! ```text
//! RateLimitRequest -> check (bounds) -> domain -> plan (tree match per descriptor, overrides,
//!   unlimited, replaces, cost) -> decide (one atomic decision: a synthetic route named after
//!   the domain, a limit and a key per descriptor) -> answer (statuses, headers)
//! ```
//!
//! Differences from envoyproxy/ratelimit: windows slide (`unit: minute` is the last 60 s, not
//! the clock's minute), and all descriptors of a request are decided in one atomic call (a
//! request refused by one descriptor is charged to none).

mod answer;
mod decide;
mod limits;
mod quota;
mod request;
mod service;
mod table;
mod tree;
mod unit;
mod wire;

pub use limits::{tag_of, Domain, Part, OVERRIDE_LABEL};
pub use request::{key_of_values, RlsError, MAX_DESCRIPTORS, MAX_KEPT_VALUE_BYTES};
pub use service::{RlsService, MAX_MESSAGE_BYTES};
pub use table::RlsTable;

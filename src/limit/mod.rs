//! The limiter: the one place where a decision becomes a verdict. The request path
//! ([`Deciding`], a future) and the batch API ([`Limiter::decide_many`]) share every rule: the
//! deny cache, the store, the route's `on_error` (allow, deny, or the in-process fallback), the
//! exceed modes (reject, delay, block, shadow), blocks and the metrics, each written once in
//! [`Limiter::cached`], [`Limiter::conclude`] and [`Limiter::record`]. An allowed request of a
//! route whose limits need the answer carries a [`Reservation`], settled by its answer's head,
//! and what only the answer's end settles (slots in flight, costs the body states) is its
//! [`Ending`].
//!
//! ```text
//! keys -> deny cache --hit--> rejected | blocked
//!            | miss
//!            v
//!        store (Redis, coalesced | memory) --error--> on_error: allow | deny | local fallback
//!            v
//!        mode: reject | block -> 429 (cached) ; delay -> wait, decide again ; shadow -> forward
//! ```

mod admin;
mod charged;
mod deciding;
mod delay;
mod deny_cache;
mod ending;
mod header_number;
mod header_values;
pub mod headers;
mod key_slot;
mod keys;
mod layout;
mod limiter;
pub mod lookup;
mod outcome;
mod outcome_rule;
mod policy;
pub mod refusal;
mod refused;
mod reservation;
mod resets;
mod tier;
mod verdict;

pub use admin::{LimitReport, ResetSlot, Usage};
pub use charged::Settled;
pub use deciding::Deciding;
pub use deny_cache::{CachedDenial, DenyCache};
pub use ending::Ending;
pub use key_slot::KeySlot;
pub use keys::{KeysError, RequestKeys};
pub use limiter::Limiter;
pub use outcome::{Recount, Reservation};
pub use outcome_rule::{AtEnd, OutcomeRule};
pub use policy::{limit_set, RoutePolicy, EMBEDDED_SETTLE};
pub use refused::{Reason, RefusedKey, MAX_BLOCKED_LISTED};
pub use resets::ResetFollower;
pub use tier::Tier;
pub use verdict::{Verdict, STORE_UNAVAILABLE_RETRY_SECS};

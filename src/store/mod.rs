//! Decision stores: a [`Store`] decides every limit of a request in one atomic step. Redis runs
//! the decision script (`lua/`), coalescing the decisions in flight for one node into one call;
//! the embedded [`MemoryStore`] runs the same steps in process. Both answer in the script's
//! reply layout, decoded in one place ([`Decision::from_reply`]), so the two cannot drift apart
//! in how a reply is read.
//!
//! A store knows nothing of routes, modes or HTTP: it is handed a [`LimitSet`] (the effective
//! limits of one request), the bases of its key slots ([`layout::base`]) and a cost, and answers
//! a [`Decision`]; a [`Settlement`] later takes a charge back or clears a count.

mod backend;
mod decision;
mod eviction;
pub mod layout;
mod memory;
mod plan;
mod redis;
pub mod refused;
mod request;

pub use backend::{Answer, Store};
pub use decision::{Decision, LimitUsage, Outcome, Receipt, ReceiptPart, StoreError, REPLY_HEAD};
pub use eviction::{eviction_warnings, probe_eviction, EvictionTally};
pub use memory::{Marker, MemoryStore};
pub use plan::{BlockSpec, Limit, LimitSet, Refusals, StateSpec};
pub use redis::{
    decision_library, decision_script, fred_url, Deadline, Library, NodeEviction, OnError,
    RedisStore,
};
pub use request::{local_now_us, DecisionRequest, Settlement};

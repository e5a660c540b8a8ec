//! What an attempt costs when its answer says so (`cost_from`): the tokens an LLM answer used,
//! the bytes a download sent. [`CostFrom`] names where the answer states it (a header, a member
//! of a JSON body, a member of the last server-sent event that carries it), [`Reserve`] what an
//! attempt holds until then (`cost`), and [`CostReader`] reads a body as it streams past, a
//! chunk at a time, never holding it: [`json::PathScanner`] finds one member of a JSON document
//! with memory for its nesting only, and [`sse::EventReader`] splits an event stream into events
//! and hands each event's data to such a scanner.

pub mod json;
#[cfg(test)]
mod json_tests;
mod number;
mod reader;
mod sources;
pub mod sse;
#[cfg(test)]
mod sse_tests;

pub use reader::{from_header, CostReader};
pub use sources::{CostFrom, CostOutOfRange, Reserve, DEFAULT_MAX_COST_BODY_BYTES};

//! The decisions' suites as one test binary: the reference models (accuracy, outcomes, attempts
//! in flight, settled costs), the memory store against Redis, coalesced calls, the cluster, and
//! the rate-limit headers' exact figures. The test command runs this binary twice: on the
//! Functions library, then once more on the scripts (`SLIDEGATE_TEST_SCRIPTS=eval`).

#[path = "../support/mod.rs"]
mod support;

mod accuracy;
mod cluster;
mod coalescing_batch_equivalence;
mod coalescing_exact_per_key;
mod cost_model;
mod inflight_model;
mod outcomes;
mod outcomes_reset_in_flight;
mod rate_limits_all_or_none;
mod rate_limits_blocks;
mod rate_limits_exact;
mod store_equivalence;

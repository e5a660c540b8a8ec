//! The store's suites as one test binary: eviction policy, faults, replica acknowledgements,
//! the lanes' own connections, Functions, Sentinel, and coalesced calls.

#[path = "../support/mod.rs"]
mod support;

mod cluster_split_key;
mod coalescing_killed_redis;
mod coalescing_lone_call;
mod coalescing_request_priority;
mod redis_functions;
mod sentinel;
mod store_direct_client;
mod store_errors_per_decision;
mod store_eviction_policy;
mod store_faults;
mod store_replica_acks;
mod store_replica_acks_replicas;

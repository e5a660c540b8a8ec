//! Limits and keys as one test binary: counters, delays, the deny cache, shadow mode, Redis
//! hiccups, daily caps, segments, keys (by value, from JWTs, in a flood), and attempts in flight.

#[path = "../support/mod.rs"]
mod support;

mod daily_caps;
mod inflight;
mod inflight_after_a_stall;
mod jwt_keys;
mod key_flood;
mod keys;
mod keys_by_value;
mod overflow_sketch;
mod rate_limits_counter;
mod rate_limits_delay;
mod rate_limits_deny_cache;
mod rate_limits_redis_hiccups;
mod rate_limits_shadow;
mod segments;

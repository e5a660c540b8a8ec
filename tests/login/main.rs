//! The OTP and login guard as one test binary: keys from bodies, rotating IPs, outcomes counted
//! per account, and clients that leave.

#[path = "../support/mod.rs"]
mod support;

mod login_after_a_store_stall;
mod login_in_flight_wait;
mod login_listed_after_attempts_in_flight;
mod login_no_lockout_without_failure;
mod login_outcomes;
mod login_success_forgives_only_its_account;
mod otp_key_bodies;
mod otp_rotating_ips;
mod outcomes_client_leaves;
mod outcomes_in_flight_past_the_window;

//! The tower layer embedded in other servers, as one test binary.

#[path = "../support/mod.rs"]
mod support;

mod layer_body_keys;
mod layer_like_gateway;
mod layer_outcomes;
mod layer_tonic;
mod layer_tower_service;

//! The command line's suites as one test binary: `check`, `key`, `campaign` and `segment`, and
//! the image's build inputs.

#[path = "../support/mod.rs"]
mod support;

mod cli;
mod cli_campaign;
mod cli_check;
mod cli_check_layer;
mod cli_check_warnings;
mod cli_key;
mod cli_segment_build;
mod image_inputs;

//! The config file's suites as one test binary: errors that name FILE:LINE:COLUMN, what loads,
//! the `check` command, files that reload themselves, and every fixture in use.

#[path = "../support/mod.rs"]
mod support;

mod config_check_command;
mod config_errors_answers;
mod config_errors_limits;
mod config_errors_routes;
mod config_errors_server_store;
mod config_errors_syntax;
mod config_fixtures;
mod config_loads;
mod config_watched_files;
mod config_watched_links;

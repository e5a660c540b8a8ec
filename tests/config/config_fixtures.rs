//! Every file under `tests/fixtures/config/` is used: named by a test in one of the config test
//! files (`config_errors_*.rs`, `config_loads.rs`, `config_check_command.rs`).

use crate::support;

use support::config::{manifest_dir, FIXTURES};

#[test]
fn every_fixture_has_a_test() {
    let test_files = concat!(
        include_str!("config_errors_syntax.rs"),
        include_str!("config_errors_limits.rs"),
        include_str!("config_errors_routes.rs"),
        include_str!("config_errors_server_store.rs"),
        include_str!("config_loads.rs"),
        include_str!("config_check_command.rs"),
    );
    for entry in std::fs::read_dir(manifest_dir().join(FIXTURES)).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            test_files.contains(&format!("\"{name}\"")),
            "fixture {name} is not used by any test"
        );
    }
}

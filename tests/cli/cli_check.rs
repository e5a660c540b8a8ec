//! `slidegate check` as an operator runs it (README, "Running"): it names what is wrong with a file
//! and where: a file that does not exist, with how to name one, and a value of the wrong type, at
//! its FILE:LINE:COLUMN.

use crate::support;

use support::cli_commands::{path_arg, slidegate, stderr, stdout};
use support::gateway;

/// `check` on a file that does not exist says so and how to name one; on a value of the wrong
/// type it names the file, line and column, the field and the type expected.
#[test]
fn check_names_a_missing_file_and_a_wrong_type_where_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.toml");
    let run = slidegate(&["check", "--config", path_arg(&missing)], &[]);
    assert!(!run.status.success());
    let err = stderr(&run);
    assert!(
        err.contains(&format!("{}: no such file", missing.display())),
        "{err}"
    );
    assert!(err.contains("--config FILE"), "{err}");

    let toml = gateway::config(
        "backend = \"memory\"",
        "http://127.0.0.1:9",
        "[[routes]]\nname = \"r\"\npath = \"/x\"\nupstream = \"up\"\n  [[routes.limits]]\n  name = \"l\"\n  limit = \"5\"\n  window = \"1m\"\n",
    );
    let file = dir.path().join("config.toml");
    std::fs::write(&file, &toml).unwrap();
    let (line, text) = toml
        .lines()
        .enumerate()
        .find(|(_, l)| l.contains("limit = \"5\""))
        .unwrap();
    let column = text.find('"').unwrap() + 1;
    let run = slidegate(&["check", "--config", path_arg(&file)], &[]);
    assert!(!run.status.success());
    let err = stderr(&run);
    let expected = format!(
        "{}:{}:{column}: routes[0].limits[0].limit: invalid type: string \"5\", expected an integer",
        file.display(),
        line + 1
    );
    assert!(err.contains(&expected), "expected {expected:?} in {err}");
    assert!(stdout(&run).is_empty(), "no summary for a refused file");

    // the same file with the number written as one passes
    std::fs::write(&file, toml.replace("limit = \"5\"", "limit = 5")).unwrap();
    let run = slidegate(&["check", "--config", path_arg(&file)], &[]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(stdout(&run).contains("5 per 1m"), "{}", stdout(&run));
}

/// An empty `SLIDEGATE_CONFIG` names no file, as an unset one: `./config.toml` is read.
#[test]
fn an_empty_config_variable_is_the_default_file() {
    let dir = tempfile::tempdir().unwrap();
    let toml = gateway::config(
        "backend = \"memory\"",
        "http://127.0.0.1:9",
        "[[routes]]\nname = \"r\"\npath = \"/x\"\nupstream = \"up\"\n  [[routes.limits]]\n  name = \"l\"\n  limit = 7\n  window = \"1m\"\n",
    );
    std::fs::write(dir.path().join("config.toml"), toml).unwrap();
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_slidegate"))
        .arg("check")
        .current_dir(dir.path())
        .env("SLIDEGATE_CONFIG", "")
        .env_remove("SLIDEGATE_REDIS_URL")
        .output()
        .expect("slidegate runs");
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(stdout(&run).contains("7 per 1m"), "{}", stdout(&run));
}

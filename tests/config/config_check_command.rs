//! `slidegate check` itself, and the gateway's start: a refused file exits 1 with its location on
//! stderr, a good one is summarised route by route, warnings go to stderr and still succeed, a
//! `SLIDEGATE_REDIS_URL` that is not a Redis URL is refused, the file is named by `--config` or
//! `SLIDEGATE_CONFIG` (the flag wins), and a missing file is named with how to give one.

use crate::support;

use std::process::{Command, Output};
use std::time::Duration;

use slidegate::config::{CONFIG_ENV, REDIS_URL_ENV};
use support::config::{manifest_dir, store_url_position, NOT_REDIS};

/// `slidegate ARGS`, run from the crate root with the config-related environment cleared,
/// plus `env`.
fn slidegate(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slidegate"));
    cmd.current_dir(manifest_dir())
        .args(args)
        .env_remove(CONFIG_ENV)
        .env_remove(REDIS_URL_ENV)
        .env_remove("SLIDEGATE_ADMIN_TOKEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run slidegate")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn check_refuses_a_bad_config_with_its_location_on_stderr() {
    let out = slidegate(
        &["check", "--config", "tests/fixtures/config/zero_limit.toml"],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "stderr: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "tests/fixtures/config/zero_limit.toml:12:11: routes[0].limits[0].limit: must be at least 1, got 0\n"
    );
    assert_eq!(text(&out.stdout), "");
}

#[test]
fn check_refuses_a_toml_error_with_its_location_on_stderr() {
    let out = slidegate(
        &[
            "check",
            "--config",
            "tests/fixtures/config/unknown_key_limit.toml",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "stderr: {}", text(&out.stderr));
    assert!(
        text(&out.stderr).starts_with(
            "tests/fixtures/config/unknown_key_limit.toml:14:3: routes[0].limits[0]: unknown field `costs`"
        ),
        "stderr: {}",
        text(&out.stderr)
    );
}

#[test]
fn check_accepts_the_shipped_config_and_summarises_every_route() {
    let out = slidegate(&["check", "--config", "config.toml"], &[]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(stdout.starts_with("config.toml: OK\n"), "stdout: {stdout}");
    for route in ["otp-send", "payments", "public"] {
        assert!(
            stdout.contains(route),
            "summary does not mention {route}:\n{stdout}"
        );
    }
    assert_eq!(text(&out.stderr), "", "the shipped config has no warnings");
}

#[test]
fn check_prints_warnings_on_stderr_and_still_succeeds() {
    let out = slidegate(
        &[
            "check",
            "--config",
            "tests/fixtures/config/max_delay_on_reject.toml",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "tests/fixtures/config/max_delay_on_reject.toml:10:13: warning: routes[0].max_delay is ignored: on_exceed is \"reject\", not \"delay\"\n"
    );
}

#[test]
fn check_refuses_a_redis_url_env_that_is_not_redis() {
    let shipped = std::fs::read_to_string(manifest_dir().join("config.toml")).unwrap();
    let (line, column) = store_url_position(&shipped);
    let out = slidegate(
        &["check", "--config", "config.toml"],
        &[(REDIS_URL_ENV, NOT_REDIS)],
    );
    assert_eq!(out.status.code(), Some(1), "stderr: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        format!(
            "config.toml:{line}:{column}: SLIDEGATE_REDIS_URL (overrides store.url): `{NOT_REDIS}` is not a Redis URL (redis://, rediss://, redis-cluster://, redis-sentinel://)\n"
        )
    );
    assert_eq!(text(&out.stdout), "");
}

#[test]
fn run_refuses_a_redis_url_env_that_is_not_redis() {
    // Listeners on port 0, so a gateway that wrongly starts binds nothing in use.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    let shipped = std::fs::read_to_string(manifest_dir().join("config.toml")).unwrap();
    let local: String = shipped
        .lines()
        .map(|l| match l.starts_with("listen = ") {
            true => "listen = \"127.0.0.1:0\"\n".to_string(),
            false => format!("{l}\n"),
        })
        .collect();
    assert_eq!(local.matches("listen = \"127.0.0.1:0\"").count(), 2);
    std::fs::write(&path, &local).unwrap();
    let (line, column) = store_url_position(&local);
    let mut child = Command::new(env!("CARGO_BIN_EXE_slidegate"))
        .arg("--config")
        .arg(&path)
        .env_remove(CONFIG_ENV)
        .env(REDIS_URL_ENV, NOT_REDIS)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("slidegate started with a non-Redis SLIDEGATE_REDIS_URL");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "stderr: {stderr}");
    assert!(
        stderr.ends_with(&format!(
            "{}:{line}:{column}: SLIDEGATE_REDIS_URL (overrides store.url): `{NOT_REDIS}` is not a Redis URL (redis://, rediss://, redis-cluster://, redis-sentinel://)\n",
            path.display()
        )),
        "stderr: {stderr}"
    );
}

#[test]
fn check_reads_the_config_env_var_without_a_flag() {
    let out = slidegate(
        &["check"],
        &[(CONFIG_ENV, "tests/fixtures/config/zero_limit.toml")],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("tests/fixtures/config/zero_limit.toml:12:11: "),
        "stderr: {}",
        text(&out.stderr)
    );
}

/// A container started without its config mounted: the gateway (and `check`) exit 1 at once,
/// saying the file does not exist and how to name one.
#[test]
fn a_missing_config_file_is_named_with_how_to_give_one() {
    let missing = "tests/fixtures/config/does-not-exist.toml";
    let hint = "slidegate: name a config file with --config FILE or SLIDEGATE_CONFIG=FILE \
                (default ./config.toml; config.toml in the repository is a working example)\n";
    let named =
        |file: &str| format!("{file}: no such file: the config file does not exist\n{hint}");
    for args in [&[][..], &["check"][..]] {
        let out = slidegate(args, &[(CONFIG_ENV, missing)]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: stderr: {stderr}");
        assert_eq!(stderr, named(missing), "{args:?}");
    }
    let out = slidegate(&["check", "--config", "/nonexistent"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), named("/nonexistent"));
    assert_eq!(text(&out.stdout), "");
    // A file that exists but cannot be read as one gets no such hint.
    let out = slidegate(&["check", "--config", "tests/fixtures"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        !text(&out.stderr).contains("name a config file"),
        "stderr: {}",
        text(&out.stderr)
    );
}

#[test]
fn config_flag_wins_over_the_config_env_var() {
    let out = slidegate(
        &["check", "--config", "config.toml"],
        &[(CONFIG_ENV, "tests/fixtures/config/zero_limit.toml")],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("config.toml: OK\n"));
}

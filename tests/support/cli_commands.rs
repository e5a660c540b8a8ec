//! The `slidegate` binary's subcommands as the CLI tests run them: the binary with the
//! config-related environment cleared, its output as text, and a gateway's `/admin/usage`.

use std::path::Path;
use std::process::{Command, Output};

use super::gateway::TOKEN;
use super::http::HttpClient;

/// `slidegate ARGS...` with the config-related environment cleared, plus `envs`.
pub fn slidegate(args: &[&str], envs: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_slidegate"))
        .args(args)
        .env_remove("SLIDEGATE_CONFIG")
        .env_remove("SLIDEGATE_REDIS_URL")
        .env_remove("SLIDEGATE_KEY_SECRET")
        .env_remove("SLIDEGATE_ADMIN_TOKEN")
        .envs(envs.iter().copied())
        .output()
        .expect("slidegate runs")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn path_arg(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temp path")
}

pub async fn usage(admin: &str, query: &str) -> serde_json::Value {
    let auth = format!("Bearer {TOKEN}");
    let r = HttpClient::default()
        .get(
            &format!("http://{admin}/admin/usage?{query}"),
            &[("authorization", &auth)],
        )
        .await;
    assert_eq!(r.status, 200, "{query}: {}", r.body);
    r.json()
}

/// `slidegate check --config FILE` (plus `extra` arguments) on `toml` written to a fresh
/// temporary file named `name`, with `envs`; the file's path comes back with the output.
pub fn check_text(
    name: &str,
    toml: &str,
    extra: &[&str],
    envs: &[(&str, &str)],
) -> (tempfile::TempDir, String, Output) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(name);
    std::fs::write(&file, toml).unwrap();
    let file = path_arg(&file).to_string();
    let mut args = vec!["check", "--config", file.as_str()];
    args.extend_from_slice(extra);
    let out = slidegate(&args, envs);
    (dir, file, out)
}

/// `LINE:COLUMN` (1-based) of the first occurrence of `needle` in `text`.
pub fn line_column(text: &str, needle: &str) -> String {
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} in the text"));
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    format!("{line}:{column}")
}

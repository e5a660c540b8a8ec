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

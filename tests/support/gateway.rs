//! Starts real gateways in process, from TOML text, on port 0.

use std::path::PathBuf;

use slidegate::app::{self, Running};
use slidegate::config::Config;

/// The admin token the test gateways use.
pub const TOKEN: &str = "test-token";

/// A running gateway, its config file and addresses.
pub struct Gateway {
    pub running: Option<Running>,
    pub config_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Gateway {
    /// `http://127.0.0.1:PORT` of the proxy listener.
    pub fn url(&self, path: &str) -> String {
        format!(
            "http://{}{}",
            self.running.as_ref().unwrap().proxy_addr,
            path
        )
    }

    /// `http://127.0.0.1:PORT` of the admin listener.
    pub fn admin(&self, path: &str) -> String {
        format!(
            "http://{}{}",
            self.running.as_ref().unwrap().admin_addr,
            path
        )
    }

    /// The JSON answer of an admin `GET` of `path`, with the test token.
    pub async fn admin_json(&self, path: &str) -> serde_json::Value {
        let auth = format!("Bearer {TOKEN}");
        super::http::HttpClient::default()
            .get(&self.admin(path), &[("authorization", &auth)])
            .await
            .json()
    }

    /// The running gateway.
    pub fn running(&self) -> &Running {
        self.running.as_ref().unwrap()
    }

    /// Rewrites the config file (for reload tests).
    pub fn rewrite(&self, toml: &str) {
        std::fs::write(&self.config_path, toml).unwrap();
    }

    /// Writes a file next to the config file (segment bitmaps, plans).
    pub fn write_file(&self, name: &str, contents: &[u8]) {
        let dir = self.config_path.parent().unwrap();
        std::fs::write(dir.join(name), contents).unwrap();
    }

    /// Stops it gracefully.
    pub async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
    }
}

/// Validates `toml` (as a file, with the test admin token) and starts a gateway from it.
pub async fn start(toml: &str) -> Gateway {
    start_with_files(toml, &[]).await
}

/// Like [`start`], with `files` (name, contents) written next to the config file first.
pub async fn start_with_files(toml: &str, files: &[(&str, Vec<u8>)]) -> Gateway {
    start_with_env(toml, files, &[]).await
}

/// Like [`start_with_files`], with environment variables `env` (name, value) for the config
/// (a hash secret) beside the test admin token.
pub async fn start_with_env(
    toml: &str,
    files: &[(&str, Vec<u8>)],
    env: &[(&str, &str)],
) -> Gateway {
    let dir = tempfile::tempdir().unwrap();
    for (name, contents) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }
    let config_path = dir.path().join("config.toml");
    std::fs::write(&config_path, toml).unwrap();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let config = Config::load_with_env(&config_path, move |name: &str| {
        if name == "SLIDEGATE_ADMIN_TOKEN" {
            return Some(TOKEN.to_string());
        }
        env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    })
    .unwrap_or_else(|e| panic!("test config invalid: {e}\n{toml}"));
    let running = app::start(config).await.expect("gateway starts");
    Gateway {
        running: Some(running),
        config_path,
        _dir: dir,
    }
}

/// The environment variable that picks `store.scripts` for the tests' Redis stores that set
/// none ("auto" when unset): the suites run on the Functions library by default (Redis 7), and
/// with `SLIDEGATE_TEST_SCRIPTS=eval` once more on scripts.
pub const SCRIPTS_ENV: &str = "SLIDEGATE_TEST_SCRIPTS";

/// `store.scripts` as [`SCRIPTS_ENV`] says, for a `[store]` body that sets none.
pub fn scripts_line(store: &str) -> String {
    match std::env::var(SCRIPTS_ENV) {
        Ok(mode) if !store.contains("scripts =") => format!("\nscripts = \"{mode}\""),
        _ => String::new(),
    }
}

/// A config with both listeners on port 0, the given store section (with `store.scripts` from
/// [`SCRIPTS_ENV`] when it sets none), one upstream named `up`, and `routes` (TOML
/// `[[routes]]` text) appended.
pub fn config(store: &str, upstream_url: &str, routes: &str) -> String {
    let scripts = scripts_line(store);
    format!(
        r#"
[server]
listen = "127.0.0.1:0"

[admin]
listen = "127.0.0.1:0"

[store]
{store}{scripts}

[upstreams.up]
url = "{upstream_url}"
connect_timeout = "500ms"
timeout = "2s"

{routes}
"#
    )
}

/// A `[store]` body for Redis at `url` with a unique key prefix.
pub fn redis_store(url: &str, prefix: &str) -> String {
    format!("backend = \"redis\"\nurl = \"{url}\"\nkey_prefix = \"{prefix}\"\ntimeout = \"200ms\"")
}

/// `config` with extra `[server]` settings (TOML lines) after its `listen`.
pub fn with_server(config: &str, settings: &str) -> String {
    let anchor = "listen = \"127.0.0.1:0\"\n\n[admin]";
    assert!(config.contains(anchor), "not a config from `config()`");
    config.replacen(
        anchor,
        &format!("listen = \"127.0.0.1:0\"\n{settings}\n\n[admin]"),
        1,
    )
}

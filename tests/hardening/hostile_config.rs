//! Careless configs and secrets (README, "Configuration", "Admin listener" and "Protecting OTP and login endpoints"): `check` (and the start) warn about
//! settings that weaken the gateway, naming each; a Redis password never shows (a password
//! holding `@` included, a URL that does not parse at all) in `/admin/config`, the start-up log
//! or a validation error of `check` or the start; a hashed
//! API key never shows raw in the access log, yet its plan applies (the plans file holds raw
//! keys), and `[plans] unknown = "reject"` answers 403 `unknown_key`.

use crate::support;

use std::path::Path;

use support::gateway::{config, TOKEN};
use support::http::HttpClient;
use support::process::{command, Process};
use support::upstream;

fn check(path: &Path) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_slidegate"))
        .args(["check", "--config"])
        .arg(path)
        .env_remove("SLIDEGATE_REDIS_URL")
        .env_remove("SLIDEGATE_ADMIN_TOKEN")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_warns_about_settings_that_weaken_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(
        &path,
        r#"
[server]
trusted_proxies = ["0.0.0.0/0", "::/0"]
ipv6_prefix = 16

[admin]
listen = "0.0.0.0:9091"
"#,
    )
    .unwrap();
    let (ok, _, stderr) = check(&path);
    assert!(ok, "warnings do not refuse: {stderr}");
    for expected in [
        "config.toml:3:20: warning: server.trusted_proxies: `0.0.0.0/0` trusts every address",
        "config.toml:3:33: warning: server.trusted_proxies: `::/0` trusts every address",
        "config.toml:4:15: warning: server.ipv6_prefix: 16",
        "config.toml:7:10: warning: admin.listen: 0.0.0.0:9091 is reachable from other hosts and no admin token is set",
        "warning: no routes",
    ] {
        assert!(stderr.contains(expected), "missing {expected:?} in:\n{stderr}");
    }
}

#[test]
fn a_password_with_an_at_sign_never_shows_in_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(
        &path,
        "[store]\nurl = \"https://:p@ss@w0rd@redis.example:6379\"\n",
    )
    .unwrap();
    let (ok, _, stderr) = check(&path);
    assert!(!ok);
    assert!(stderr.contains("store.url"), "{stderr}");
    for secret in ["p@ss", "ss@w0rd", "w0rd"] {
        assert!(!stderr.contains(secret), "{secret} leaked: {stderr}");
    }
}

/// The misspelt URLs an operator writes, each with the password `hunter2`: none parses, and
/// neither `check` nor the start shows the password (or the user) when refusing it, whether it
/// comes from the file or from `SLIDEGATE_REDIS_URL`; an upstream URL likewise.
#[test]
fn a_value_that_does_not_parse_never_shows_its_password() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    let refused = |stderr: &str, what: &str| {
        assert!(stderr.contains("***"), "{what}: nothing masked: {stderr}");
        for secret in ["hunter2", "hun", "ter2", "opsuser"] {
            assert!(
                !stderr.contains(secret),
                "{what}: {secret} leaked: {stderr}"
            );
        }
    };
    // a value the client library would take, so `check` does too: its summary shows it masked
    let url = "redis://opsuser:hun ter2@redis.example:6379";
    std::fs::write(&path, format!("[store]\nurl = \"{url}\"\n")).unwrap();
    let (ok, stdout, stderr) = check(&path);
    assert!(ok, "{stderr}");
    refused(&stdout, url);
    for url in [
        "rediss//:hunter2@redis.example:6379",
        "redis:/opsuser:hunter2@redis.example",
        "redis://opsuser:hunter2@",
        "redis://opsuser:hunter2",
        "redis://opsuser:hun/ter2@redis.example",
        "redis://opsuser:hun?ter2@redis.example",
        "opsuser:hunter2@redis.example:6379",
        // refused, not ignored: the sentinels are asked with the store's own credentials
        "redis-sentinel://redis.example:26379/m?sentinelPassword=hunter2",
    ] {
        std::fs::write(&path, format!("[store]\nurl = \"{url}\"\n")).unwrap();
        let (ok, _, stderr) = check(&path);
        assert!(!ok, "{url} accepted");
        assert!(stderr.contains("store.url"), "{stderr}");
        refused(&stderr, url);
        // the same value from the environment, at the start of the gateway itself
        std::fs::write(
            &path,
            "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n",
        )
        .unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_slidegate"))
            .arg("--config")
            .arg(&path)
            .env("SLIDEGATE_REDIS_URL", url)
            .env_remove("SLIDEGATE_ADMIN_TOKEN")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{url}: the gateway started");
        refused(&String::from_utf8_lossy(&out.stderr), url);
    }
    std::fs::write(
        &path,
        "[upstreams.up]\nurl = \"htp//opsuser:hunter2@upstream.example\"\n",
    )
    .unwrap();
    let (ok, _, stderr) = check(&path);
    assert!(!ok);
    refused(&stderr, "upstream");
}

/// The running gateway shows the URL redacted in `/admin/config` and in its start-up line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_password_is_redacted_in_admin_config_and_logs() {
    let up = upstream::start().await;
    let store = "backend = \"redis\"\nurl = \"redis://:p@ss@w0rd@127.0.0.1:1\"\ntimeout = \"50ms\"";
    let text = config(store, &up.url(), "");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, &text).unwrap();
    let gw = Process::spawn(command(&path, &[("SLIDEGATE_ADMIN_TOKEN", TOKEN)]));
    let lines = gw.lines_until("listening on");
    let log = lines.join("\n");
    let admin = log
        .split("(admin ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .expect("the start-up line names the admin listener");
    assert!(log.contains("redis://***@127.0.0.1:1"), "{log}");
    let auth = format!("Bearer {TOKEN}");
    let view = HttpClient::default()
        .get(
            &format!("http://{admin}/admin/config"),
            &[("authorization", &auth)],
        )
        .await
        .json();
    assert_eq!(view["store"]["url"], "redis://***@127.0.0.1:1");
    for secret in ["p@ss", "w0rd"] {
        assert!(!log.contains(secret) && !view.to_string().contains(secret));
    }
}

const PLAN_ROUTE: &str = r#"
[plans]
members_file = "plans.toml"
unknown = "reject"

[[routes]]
name = "api"
path = "/api/*"
upstream = "up"
key = [{ part = "header:x-api-key", hash = true }]
  [[routes.limits]]
  name = "per-minute"
  limit = 1
  window = "1m"
  [routes.limits.plans]
  gold = 3
"#;

/// A hashed API key: its plan applies from the raw key in the plans file, a key on a plan the
/// route gives no values gets the route's own, a key on no plan is 403 `unknown_key`, and the
/// access log shows the hash, never the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hashed_api_keys_keep_their_plans_and_never_show_raw() {
    let up = upstream::start().await;
    let text = format!(
        "[keys]\nhash_secret_env = \"SLIDEGATE_KEY_SECRET\"\n{}",
        config("backend = \"memory\"", &up.url(), PLAN_ROUTE)
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, &text).unwrap();
    std::fs::write(
        dir.path().join("plans.toml"),
        "\"live_gold_key\" = \"gold\"\n\"live_silver_key\" = \"silver\"\n",
    )
    .unwrap();
    let envs = [
        ("SLIDEGATE_KEY_SECRET", "s3cret"),
        ("SLIDEGATE_LOG", "info"),
    ];
    let gw = Process::start(&path, &envs);
    let (proxy, _) = gw.listening();
    let client = HttpClient::default();
    let url = format!("http://{proxy}/api/x");
    let gold = [("x-api-key", "live_gold_key")];
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(client.status(&url, &gold).await);
    }
    assert_eq!(
        statuses,
        [200, 200, 200, 429],
        "the gold plan's 3 applied to the hashed key"
    );
    let stranger = client.get(&url, &[("x-api-key", "live_unknown")]).await;
    assert_eq!(stranger.status, 403);
    assert_eq!(stranger.json()["error"], "unknown_key");
    // on a plan, but one this route gives no values: the route's own limit of 1, not a 403
    let silver = [("x-api-key", "live_silver_key")];
    let silver_statuses = [
        client.status(&url, &silver).await,
        client.status(&url, &silver).await,
    ];
    assert_eq!(silver_statuses, [200, 429], "the route's own 1 applied");
    let rejected = client.get(&url, &gold).await;
    assert_eq!(rejected.json()["plan"], "gold");
    let log = gw.lines_until("status=403").join("\n");
    assert!(log.contains("key="), "{log}");
    assert!(
        !log.contains("live_gold_key") && !log.contains("live_unknown"),
        "{log}"
    );
}

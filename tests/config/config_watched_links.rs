//! Files that become symlinks: a plans file replaced, after the gateway started, by a symlink to
//! a file in another directory is followed there, so an edit of that file reloads within 2 s
//! with no signal, as an edit of the file itself would.

use std::time::{Duration, Instant};

use crate::support;
use support::http::HttpClient;
use support::process::Process;
use support::upstream;

use super::config_watched_files::{config, reloads, within};

const TOKEN: &str = "watch-links-admin-token-0123456789";

/// `"plan"` of `key` on route `all` in `/admin/usage`, when one applies.
async fn plan_of(client: &HttpClient, admin: std::net::SocketAddr, key: &str) -> Option<String> {
    let url = format!("http://{admin}/admin/usage?route=all&key={key}");
    let bearer = format!("Bearer {TOKEN}");
    let r = client.get(&url, &[("authorization", &bearer)]).await;
    r.json()["plan"].as_str().map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_file_turned_into_a_symlink_is_followed_to_its_target() {
    let up = upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (mounted, elsewhere) = (dir.path().join("mounted"), dir.path().join("elsewhere"));
    std::fs::create_dir(&mounted).unwrap();
    std::fs::create_dir(&elsewhere).unwrap();
    let toml = config(&up.url(), 1, "")
        .replace(
            "[admin]\nlisten = \"127.0.0.1:0\"\n",
            "[admin]\nlisten = \"127.0.0.1:0\"\ntoken_env = \"WATCH_ADMIN_TOKEN\"\n",
        )
        .replace(
            "path = \"/*\"\n",
            "path = \"/*\"\nkey = [\"header:x-key\"]\n",
        )
        + "[routes.limits.plans]\ngold = 2\n[plans]\nmembers_file = \"plans.toml\"\n";
    let file = mounted.join("config.toml");
    std::fs::write(&file, toml).unwrap();
    std::fs::write(mounted.join("plans.toml"), "\"k-gold\" = \"gold\"\n").unwrap();
    let process = Process::start(&file, &[("WATCH_ADMIN_TOKEN", TOKEN)]);
    let (_, admin) = process.listening();
    let client = HttpClient::default();
    assert_eq!(
        plan_of(&client, admin, "k-gold").await.as_deref(),
        Some("gold")
    );

    // The same content, now through a symlink into another directory: nothing to reload.
    let target = elsewhere.join("plans.toml");
    std::fs::write(&target, "\"k-gold\" = \"gold\"\n").unwrap();
    std::os::unix::fs::symlink(&target, mounted.join("plans.tmp")).unwrap();
    std::fs::rename(mounted.join("plans.tmp"), mounted.join("plans.toml")).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // An edit where the link points is an edit of the plans file.
    let edited = Instant::now();
    std::fs::write(&target, "\"k-gold\" = \"gold\"\n\"k-new\" = \"gold\"\n").unwrap();
    within(edited, Duration::from_secs(2), "k-new is gold", || {
        let client = client.clone();
        async move { plan_of(&client, admin, "k-new").await.as_deref() == Some("gold") }
    })
    .await;
    assert_eq!(
        reloads(&client, admin, "success").await,
        1,
        "one reload: the edit"
    );
    drop(process);
}

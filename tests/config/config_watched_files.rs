//! Files that reload themselves: the running binary reloads within 2 s of a Kubernetes
//! ConfigMap's `..data` symlink swap and of an atomic rename over its config file, as `SIGHUP`
//! would (counts survive); a file that does not validate is refused and counted as a failed
//! reload while the running config stays; `server.watch_files = false` turns it off; the JWT
//! public key file is watched too.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use support::http::HttpClient;
use support::process::Process;
use support::upstream;

/// A gateway config: one route allowing `limit` requests a minute; `server` extra lines.
pub(super) fn config(upstream: &str, limit: u32, server: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n{server}\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [store]\nbackend = \"memory\"\n[upstreams.up]\nurl = \"{upstream}\"\n\
         [[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n\
         [[routes.limits]]\nname = \"per-minute\"\nlimit = {limit}\nwindow = \"1m\"\n"
    )
}

/// Writes `text` beside `path` and renames it over `path` (how editors and tools replace a
/// file: the old inode is gone, never half written).
fn replace_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("toml.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A running gateway's proxy URL and admin address.
struct Started {
    process: Process,
    url: String,
    admin: std::net::SocketAddr,
}

fn start(config: &Path) -> Started {
    let process = Process::start(config, &[]);
    let (proxy, admin) = process.listening();
    Started {
        process,
        url: format!("http://{proxy}/x"),
        admin,
    }
}

/// `slidegate_config_reloads_total{result}` now (0 before the first).
pub(super) async fn reloads(client: &HttpClient, admin: std::net::SocketAddr, result: &str) -> u64 {
    let metrics = client
        .get(&format!("http://{admin}/metrics"), &[])
        .await
        .body;
    let series = format!("slidegate_config_reloads_total{{result=\"{result}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |v| v.parse().unwrap())
}

/// Waits (at most `within` after `since`) until `check` holds; the time it took.
pub(super) async fn within<F, Fut>(
    since: Instant,
    within: Duration,
    what: &str,
    mut check: F,
) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    loop {
        if check().await {
            return since.elapsed();
        }
        assert!(since.elapsed() < within, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A ConfigMap as the kubelet lays it out: `FILE -> ..data/FILE`, `..data -> ..<version>`; an
/// update writes a new version directory and renames a new `..data` symlink over the old one.
/// The file's own symlink never changes.
struct ConfigMap {
    mount: PathBuf,
    file: &'static str,
    versions: u32,
}

impl ConfigMap {
    /// `mount` holding `file` with `text`, as its first version.
    fn mount(mount: &Path, file: &'static str, text: &str) -> ConfigMap {
        let mut map = ConfigMap {
            mount: mount.to_path_buf(),
            file,
            versions: 0,
        };
        let first = map.version(text);
        std::os::unix::fs::symlink(first, mount.join("..data")).unwrap();
        std::os::unix::fs::symlink(format!("..data/{file}"), mount.join(file)).unwrap();
        map
    }

    /// Writes the next version directory; its name.
    fn version(&mut self, text: &str) -> String {
        self.versions += 1;
        let name = format!(
            "..2025_01_01_00_0{}_00.{}",
            self.versions - 1,
            self.versions
        );
        let dir = self.mount.join(&name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join(self.file), text).unwrap();
        name
    }

    /// Publishes `text` as the kubelet does; the instant of the swap.
    fn update(&mut self, text: &str) -> Instant {
        let next = self.version(text);
        std::os::unix::fs::symlink(next, self.mount.join("..data_tmp")).unwrap();
        let swapped = Instant::now();
        std::fs::rename(self.mount.join("..data_tmp"), self.mount.join("..data")).unwrap();
        swapped
    }

    /// The path the gateway reads.
    fn path(&self) -> PathBuf {
        self.mount.join(self.file)
    }
}

/// The config file mounted as a ConfigMap: swapping `..data` reloads it within 2 s, with no
/// signal, and counts survive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_data_swap_reloads_within_2_s() {
    let up = upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut map = ConfigMap::mount(dir.path(), "config.toml", &config(&up.url(), 1, ""));

    let gw = start(&map.path());
    let client = HttpClient::default();
    assert_eq!(client.status(&gw.url, &[]).await, 200);
    assert_eq!(client.status(&gw.url, &[]).await, 429);

    let swapped = map.update(&config(&up.url(), 3, ""));
    within(
        swapped,
        Duration::from_secs(2),
        "the new limit applies",
        || {
            let (client, url) = (client.clone(), gw.url.clone());
            async move { client.status(&url, &[]).await == 200 }
        },
    )
    .await;
    assert_eq!(
        client.status(&gw.url, &[]).await,
        200,
        "3 a minute, the first request still counted"
    );
    assert_eq!(client.status(&gw.url, &[]).await, 429);
    assert_eq!(reloads(&client, gw.admin, "success").await, 1);
    drop(gw.process);
}

/// An atomic rename over the config file reloads within 2 s; one whose file does not validate
/// is counted as a failed reload and the running config stays. A second gateway with
/// `watch_files = false`, whose file is replaced the same way, reloads nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_atomic_rename_reloads_and_a_bad_file_is_refused() {
    let up = upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (watched, unwatched) = (dir.path().join("a.toml"), dir.path().join("b.toml"));
    std::fs::write(&watched, config(&up.url(), 1, "")).unwrap();
    let off = "watch_files = false";
    std::fs::write(&unwatched, config(&up.url(), 1, off)).unwrap();
    let (gw, quiet) = (start(&watched), start(&unwatched));
    let client = HttpClient::default();
    for g in [&gw, &quiet] {
        assert_eq!(client.status(&g.url, &[]).await, 200);
        assert_eq!(client.status(&g.url, &[]).await, 429);
    }

    let renamed = Instant::now();
    replace_atomically(&watched, &config(&up.url(), 3, ""));
    replace_atomically(&unwatched, &config(&up.url(), 3, off));
    within(
        renamed,
        Duration::from_secs(2),
        "the new limit applies",
        || {
            let (client, url) = (client.clone(), gw.url.clone());
            async move { client.status(&url, &[]).await == 200 }
        },
    )
    .await;
    assert_eq!(reloads(&client, gw.admin, "success").await, 1);

    let broken = Instant::now();
    replace_atomically(&watched, "[[routes]]\nname = 1\n");
    within(
        broken,
        Duration::from_secs(2),
        "a failed reload counted",
        || {
            let (client, admin) = (client.clone(), gw.admin);
            async move { reloads(&client, admin, "failure").await == 1 }
        },
    )
    .await;
    assert_eq!(
        client.status(&gw.url, &[]).await,
        200,
        "the running config (3 a minute) stays"
    );
    assert_eq!(client.status(&gw.url, &[]).await, 429);
    assert_eq!(reloads(&client, gw.admin, "success").await, 1);

    // The unwatched gateway's file was replaced well over 2 s ago by now.
    let waited = renamed.elapsed();
    if waited < Duration::from_millis(2500) {
        tokio::time::sleep(Duration::from_millis(2500) - waited).await;
    }
    assert_eq!(
        client.status(&quiet.url, &[]).await,
        429,
        "watch_files = false: still 1 a minute"
    );
    assert_eq!(reloads(&client, quiet.admin, "success").await, 0);
    drop((gw.process, quiet.process));
}

/// `SIGHUP` right after an edit (a config tool that writes the file, then runs `systemctl
/// reload`): the signal loads the edit, and the watch, finding the files as that reload read
/// them, reloads nothing more. A bad file so signalled counts one failure, not two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_a_sighup_already_loaded_reloads_once() {
    let up = upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, config(&up.url(), 1, "")).unwrap();
    let gw = start(&path);
    let client = HttpClient::default();
    let hup = || {
        let pid = gw.process.pid().to_string();
        let status = std::process::Command::new("kill")
            .args(["-HUP", &pid])
            .status();
        assert!(status.expect("kill runs").success());
    };
    for (text, result) in [
        (config(&up.url(), 3, ""), "success"),
        ("[[routes]]\nname = 1\n".to_string(), "failure"),
    ] {
        let edited = Instant::now();
        replace_atomically(&path, &text);
        hup();
        within(
            edited,
            Duration::from_secs(2),
            "the signal's reload",
            || {
                let (client, admin) = (client.clone(), gw.admin);
                async move { reloads(&client, admin, result).await == 1 }
            },
        )
        .await;
        // past the watch's quiet time and its longest delay (1 s) after the edit's events
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(
            reloads(&client, gw.admin, result).await,
            1,
            "{result}: once"
        );
    }
    assert_eq!(reloads(&client, gw.admin, "success").await, 1);
    drop(gw.process);
}

/// The rate-limit service's YAML directory mounted as a ConfigMap (`edge.yaml ->
/// ..data/edge.yaml`, `..data -> ..<timestamp>`), as envoyproxy/ratelimit's operators mount it:
/// swapping `..data` reloads the domain's limits within 2 s, with no signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_configmap_swap_reloads_within_2_s() {
    let up = upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("limits");
    std::fs::create_dir(&mount).unwrap();
    let yaml = |limit: u32| {
        format!(
            "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {{ unit: minute, requests_per_unit: {limit}, name: per-user }}\n"
        )
    };
    let mut map = ConfigMap::mount(&mount, "edge.yaml", &yaml(3));
    let toml = format!(
        "{}\n[rls]\nlisten = \"127.0.0.1:0\"\nconfig = \"{}\"\n",
        config(&up.url(), 5, "").replace(
            "[admin]\nlisten = \"127.0.0.1:0\"\n",
            "[admin]\nlisten = \"127.0.0.1:0\"\ntoken_env = \"WATCH_ADMIN_TOKEN\"\n"
        ),
        mount.display()
    );
    let file = dir.path().join("slidegate.toml");
    std::fs::write(&file, toml).unwrap();
    let token = "watch-admin-token-0123456789abcdef";
    let process = Process::start(&file, &[("WATCH_ADMIN_TOKEN", token)]);
    let (_, admin) = process.listening();
    let client = HttpClient::default();
    let bearer = format!("Bearer {token}");
    let limit = || {
        let (client, bearer) = (client.clone(), bearer.clone());
        async move {
            let r = (client.get(
                &format!("http://{admin}/admin/config"),
                &[("authorization", &bearer)],
            ))
            .await;
            r.json()["rls"]["domains"][0]["limits"][0]["limit"].as_u64()
        }
    };
    assert_eq!(limit().await, Some(3));

    let swapped = map.update(&yaml(7));
    within(
        swapped,
        Duration::from_secs(2),
        "the new limit applies",
        || {
            let limit = limit();
            async move { limit.await == Some(7) }
        },
    )
    .await;
    assert_eq!(reloads(&client, admin, "success").await, 1);
    drop(process);
}

/// The JWT public key file is watched with the config: a key rotated by replacing the file
/// reloads within 2 s, with no signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_jwt_key_file_reloads_within_2_s() {
    let up = upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("jwt.pem");
    let pem = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/jwt/es256-public.pem"
    );
    std::fs::copy(pem, &key).unwrap();
    let path = dir.path().join("c.toml");
    let text = config(&up.url(), 5, "") + "\n[jwt]\npublic_key_file = \"jwt.pem\"\n";
    std::fs::write(&path, text).unwrap();
    let gw = start(&path);
    let client = HttpClient::default();
    assert_eq!(client.status(&gw.url, &[]).await, 200);
    assert_eq!(reloads(&client, gw.admin, "success").await, 0);

    let rotated = Instant::now();
    let tmp = dir.path().join("jwt.pem.tmp");
    std::fs::copy(pem.replace("public", "public-rotated"), &tmp).unwrap();
    std::fs::rename(&tmp, &key).unwrap();
    within(
        rotated,
        Duration::from_secs(2),
        "the key file reloaded",
        || {
            let (client, admin) = (client.clone(), gw.admin);
            async move { reloads(&client, admin, "success").await == 1 }
        },
    )
    .await;
    drop(gw.process);
}

//! The example `examples/embed.rs` (an axum app behind `slidegate::RateLimitLayer`), run as a
//! user runs it: its binary (built by `cargo test` next to the test binaries) started with
//! `examples/embed.toml` on port 0, driven over real HTTP. Its limits apply exactly as the config
//! says, with the gateway's 429 bodies and headers; login failures count and successes forgive;
//! paths no route takes pass unlimited; its `/metrics` shows the decisions; with the store
//! switched to Redis, two instances share one limit.

mod support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use http::Method;
use support::gateway;
use support::http::{HttpClient, Reply};
use support::metrics;
use support::problem::assert_problem;
use support::redis::RedisServer;
use support::upstream;

/// `target/<profile>/examples/embed`: `cargo test` builds the examples before it runs the tests,
/// and this test binary is `target/<profile>/deps/embed-<hash>`.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>");
    let binary = profile_dir
        .join("examples")
        .join(format!("embed{}", std::env::consts::EXE_SUFFIX));
    let build = "run `cargo test` (which builds the examples) or `cargo build --example embed`";
    let built = std::fs::metadata(&binary)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| panic!("{} is missing: {build}", binary.display()));
    // `cargo test --test embed` rebuilds the library but not the examples: an example binary
    // older than a source it is built from would test old code.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sources = [
        root.join("src"),
        root.join("lua"),
        root.join("examples/embed.rs"),
    ];
    if let Some((path, edited)) = sources.iter().filter_map(|p| newest(p)).max_by_key(|n| n.1) {
        assert!(
            edited <= built,
            "{} is older than {}: {build}",
            binary.display(),
            path.display()
        );
    }
    binary
}

/// The newest source file (`.rs`, `.lua`: what the build reads) at or under `path`, with when
/// it was written. Other files (a README) do not make cargo rebuild the example.
fn newest(path: &Path) -> Option<(PathBuf, std::time::SystemTime)> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_dir() {
        let source = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("rs" | "lua")
        );
        return source.then_some((path.to_path_buf(), meta.modified().ok()?));
    }
    std::fs::read_dir(path)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| newest(&e.path()))
        .max_by_key(|n| n.1)
}

fn embed_toml() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/embed.toml")
}

/// A running `embed` example, killed on drop.
struct Embed {
    child: Child,
    addr: SocketAddr,
}

impl Embed {
    /// Starts the example with `config` on 127.0.0.1:0 and waits (10 s at most) for the line
    /// with the address it listens on.
    fn start(config: &Path) -> Embed {
        let mut child = Command::new(example_binary())
            .arg("--config")
            .arg(config)
            .args(["--listen", "127.0.0.1:0"])
            .env_remove("SLIDEGATE_REDIS_URL")
            .env_remove("SLIDEGATE_CONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the embed example");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut seen = Vec::new();
        while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            if let Some(addr) = line.strip_prefix("embed: listening on ") {
                let addr = addr.trim().parse().unwrap_or_else(|_| panic!("{line}"));
                return Embed { child, addr };
            }
            seen.push(line);
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "the embed example did not say where it listens within 10 s:\n{}",
            seen.join("\n")
        );
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    async fn metrics(&self) -> String {
        let r = HttpClient::default().get(&self.url("/metrics"), &[]).await;
        assert_eq!(r.status, 200);
        r.body
    }
}

impl Drop for Embed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn count(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    metrics::value(text, name, labels).unwrap_or(0.0)
}

fn decisions(text: &str, route: &str, decision: &str) -> f64 {
    count(
        text,
        "slidegate_requests_total",
        &[("route", route), ("decision", decision)],
    )
}

async fn post(client: &HttpClient, url: &str, body: &str) -> Reply {
    client
        .send(
            Method::POST,
            url,
            &[("content-type", "application/json")],
            body,
        )
        .await
}

fn login(user: &str, password: &str) -> String {
    serde_json::json!({ "username": user, "password": password }).to_string()
}

/// `POST /otp/send` is limited to 3 per 10 minutes per IP: three codes with the rate-limit
/// headers counting down, then the gateway's 429 (problem body, Retry-After, RateLimit and
/// X-RateLimit headers); `/hello`, which no route takes, passes unlimited and uncounted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otp_is_limited_as_configured_and_other_paths_pass_unlimited() {
    let app = Embed::start(&embed_toml());
    let client = HttpClient::default();
    let url = app.url("/otp/send");
    // the first spelled another way: the layer normalises it before the app routes it
    let spellings = [app.url("/x/../otp/send"), url.clone(), url.clone()];
    for (remaining, url) in ["2", "1", "0"].into_iter().zip(&spellings) {
        let r = post(&client, url, "{}").await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body, "sent\n", "the app answered");
        assert_eq!(r.header("x-ratelimit-limit"), Some("3"));
        assert_eq!(r.header("x-ratelimit-remaining"), Some(remaining));
        assert_eq!(
            r.header("ratelimit-policy"),
            Some("\"per-ip\";q=3;w=600"),
            "{:?}",
            r.headers
        );
    }
    let r = post(&client, &url, "{}").await;
    let body = assert_problem(&r, 429, "rate_limited");
    assert_eq!(body["route"], "otp");
    assert_eq!(body["limit"], "per-ip");
    assert_eq!(body["violated-policies"], serde_json::json!(["per-ip"]));
    let retry_ms = body["retry_after_ms"].as_u64().unwrap();
    assert!(
        retry_ms > 590_000 && retry_ms <= 600_000,
        "the first code leaves the 10-minute window: {body}"
    );
    let retry_after: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert_eq!(retry_after, retry_ms.div_ceil(1000));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    let ratelimit = r.header("ratelimit").unwrap();
    assert!(ratelimit.starts_with("\"per-ip\";r=0;t="), "{ratelimit}");

    for _ in 0..20 {
        let r = client.get(&app.url("/hello"), &[]).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.body, "hello\n");
        assert!(r.header("ratelimit").is_none(), "no route, no limit");
    }
    let m = app.metrics().await;
    assert_eq!(count(&m, "slidegate_deny_cache_entries", &[]), 1.0);
    assert_eq!(decisions(&m, "otp", "allowed"), 3.0);
    assert_eq!(decisions(&m, "otp", "rejected"), 1.0);
    assert_eq!(
        count(
            &m,
            "slidegate_limit_exceeded_total",
            &[("route", "otp"), ("limit", "per-ip"), ("mode", "enforced")]
        ),
        1.0
    );
    let total: f64 = metrics::series(&m, "slidegate_requests_total", &[]).sum();
    assert_eq!(total, 4.0, "the 20 unlimited requests are not counted");
}

/// `POST /login` counts failures only (count_status 401/403), a 200 forgives them
/// (reset_status), and 5 failures block the account (block_level in the 429) so that even the
/// right password gets 429. The headers of each answer include its own charge or refund.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_failures_count_successes_forgive_and_five_block() {
    let app = Embed::start(&embed_toml());
    let client = HttpClient::default();
    let url = app.url("/login");
    // a user who logs in a lot is never limited
    for _ in 0..8 {
        let r = post(&client, &url, &login("ann", "right")).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body, "welcome\n");
        assert_eq!(r.header("x-ratelimit-remaining"), Some("5"));
    }
    // 4 failures, counted one by one; then a success of the same account as sent forgives them
    // (one sent as `Ann` would count for the key `ann` and be forgiven by no one but `Ann`)
    for remaining in ["4", "3", "2", "1"] {
        let r = post(&client, &url, &login("ann", "guess")).await;
        assert_eq!(r.status, 401, "{}", r.body);
        assert_eq!(r.header("x-ratelimit-remaining"), Some(remaining));
    }
    let r = post(&client, &url, &login("ann", "right")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-ratelimit-remaining"), Some("5"));
    // 5 failures are let through again, the 6th attempt is refused and blocks the account
    for remaining in ["4", "3", "2", "1", "0"] {
        let r = post(&client, &url, &login("ANN", "guess")).await;
        assert_eq!(r.status, 401, "{}", r.body);
        assert_eq!(r.header("x-ratelimit-remaining"), Some(remaining));
    }
    let r = post(&client, &url, &login("ann", "guess")).await;
    let body = assert_problem(&r, 429, "rate_limited");
    assert_eq!(
        (body["route"].as_str(), body["limit"].as_str()),
        (Some("login"), Some("failed-logins"))
    );
    assert_eq!(body["block_level"], 1, "{body}");
    let r = post(&client, &url, &login("ann", "right")).await;
    assert_eq!(r.status, 429, "blocked, whatever the password");
    assert_eq!(r.json()["block_level"], 1);
    // another account is not touched
    let r = post(&client, &url, &login("bob", "guess")).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.header("x-ratelimit-remaining"), Some("4"));

    let m = app.metrics().await;
    let labels = [("route", "login"), ("limit", "failed-logins")];
    assert_eq!(
        count(&m, "slidegate_outcome_resets_total", &labels),
        9.0,
        "every 200 cleared the count, its own reservation with it"
    );
    assert_eq!(count(&m, "slidegate_blocks_started_total", &labels), 1.0);
    assert_eq!(decisions(&m, "login", "allowed"), 19.0);
    assert_eq!(decisions(&m, "login", "rejected"), 1.0);
    assert_eq!(decisions(&m, "login", "blocked"), 1.0);
}

/// With `[store]` switched to Redis (as the file's comment says), two instances of the app share
/// one limit: 3 codes per IP across both, the fourth refused by whichever answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_share_the_limit() {
    let redis = RedisServer::start_async().await;
    let text = std::fs::read_to_string(embed_toml()).unwrap();
    let memory = "backend = \"memory\"";
    assert_eq!(text.matches(memory).count(), 1, "embed.toml changed");
    let toml = text.replacen(
        memory,
        &format!("backend = \"redis\"\nurl = \"{}\"", redis.url()),
        1,
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("embed.toml");
    std::fs::write(&config, toml).unwrap();
    let a = Embed::start(&config);
    let b = Embed::start(&config);
    let client = HttpClient::default();
    let mut statuses = Vec::new();
    for app in [&a, &b, &a, &b, &a] {
        statuses.push(
            post(&client, &app.url("/otp/send"), "{}")
                .await
                .status
                .as_u16(),
        );
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    let ma = a.metrics().await;
    let mb = b.metrics().await;
    assert_eq!(
        (
            decisions(&ma, "otp", "allowed"),
            decisions(&mb, "otp", "allowed")
        ),
        (2.0, 1.0)
    );
    assert_eq!(
        (
            decisions(&ma, "otp", "rejected"),
            decisions(&mb, "otp", "rejected")
        ),
        (1.0, 1.0)
    );

    // A gateway on the same Redis resets the key: both apps hear it and drop their cached
    // refusals (each would otherwise answer 429 for the rest of the window without asking).
    let up = upstream::start().await;
    let routes = text
        .split_once("[[routes]]")
        .map(|(_, routes)| format!("[[routes]]{routes}"))
        .unwrap()
        .replace("[[routes]]\n", "[[routes]]\nupstream = \"up\"\n");
    let store = format!("backend = \"redis\"\nurl = \"{}\"", redis.url());
    let gw = gateway::start(&gateway::config(&store, &up.url(), &routes)).await;
    let reset = HttpClient::default()
        .send(
            Method::DELETE,
            &gw.admin("/admin/usage?route=otp&key=127.0.0.1"),
            &[("authorization", &format!("Bearer {}", gateway::TOKEN))],
            "",
        )
        .await;
    assert_eq!(reset.status, 200, "{}", reset.body);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut heard = [false, false];
    while heard != [true, true] && Instant::now() < deadline {
        for (app, heard) in [&a, &b].into_iter().zip(&mut heard) {
            let m = app.metrics().await;
            *heard = count(&m, "slidegate_deny_cache_entries", &[]) == 0.0;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        heard,
        [true, true],
        "the reset reached both apps within 5 s"
    );
    for app in [&a, &b] {
        let r = post(&client, &app.url("/otp/send"), "{}").await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    gw.stop().await;
}

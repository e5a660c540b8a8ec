//! The `slidegate` binary as an operator runs it: the start-up line, JSON logs, SIGHUP reload,
//! and SIGTERM finishing in-flight requests before exiting 0.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use support::http::HttpClient;
use support::upstream;

struct Process {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Process {
    fn start(config: &std::path::Path, envs: &[(&str, &str)]) -> Process {
        let mut child = Command::new(env!("CARGO_BIN_EXE_slidegate"))
            .arg("--config")
            .arg(config)
            .env_remove("SLIDEGATE_CONFIG")
            .env_remove("SLIDEGATE_REDIS_URL")
            .envs(envs.iter().copied())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Process { child, lines }
    }

    /// The first log line containing `needle`, within 10 s.
    fn wait_for(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            if line.contains(needle) {
                return line;
            }
        }
        panic!("no log line containing {needle:?}");
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The proxy port in a start-up line (`slidegate listening on 127.0.0.1:PORT (admin ...)`).
fn proxy_port(line: &str) -> u16 {
    let at = line
        .find("listening on 127.0.0.1:")
        .expect("a listening line")
        + 23;
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().expect("a port")
}

/// A config serving on ports the system picks (the start-up line says which).
fn write_config(dir: &std::path::Path, upstream: &str, limit: u32) -> std::path::PathBuf {
    let path = dir.join("config.toml");
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_grace = \"5s\"\n[admin]\nlisten = \"127.0.0.1:0\"\n[store]\nbackend = \"memory\"\n\
         [upstreams.up]\nurl = \"{upstream}\"\n[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n\
         [[routes.limits]]\nname = \"m\"\nlimit = {limit}\nwindow = \"1m\"\n"
    );
    std::fs::write(&path, toml).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_and_reloads_on_sighup_then_stops_on_sigterm() {
    let up = upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &up.url(), 1);
    let process = Process::start(&config, &[]);
    let line = process.wait_for("listening");
    assert!(line.contains("store: memory"), "{line}");
    let port = proxy_port(&line);

    let client = HttpClient::default();
    let url = format!("http://127.0.0.1:{port}/x");
    assert_eq!(client.get(&url, &[]).await.status, 200);
    assert_eq!(client.get(&url, &[]).await.status, 429);

    write_config(dir.path(), &up.url(), 3);
    process.signal("-HUP");
    process.wait_for("config reloaded");
    assert_eq!(
        client.get(&url, &[]).await.status,
        200,
        "the new limit applies; counts survived"
    );
    assert_eq!(client.get(&url, &[]).await.status, 200);
    assert_eq!(client.get(&url, &[]).await.status, 429);

    process.signal("-TERM");
    process.wait_for("stopped");
    let mut process = process;
    let exit = tokio::task::spawn_blocking(move || process.child.wait().unwrap())
        .await
        .unwrap();
    assert!(exit.success(), "exit status {exit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_forwarded_request_finish() {
    let up = upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &up.url(), 100);
    let mut process = Process::start(&config, &[("SLIDEGATE_LOG_FORMAT", "json")]);
    let line = process.wait_for("listening");
    let parsed: serde_json::Value = serde_json::from_str(&line).expect("JSON log line");
    assert_eq!(parsed["level"], "INFO");
    let port = proxy_port(&line);

    let client = HttpClient::default();
    let in_flight = {
        let client = client.clone();
        let url = format!("http://127.0.0.1:{port}/slow?ms=800");
        tokio::spawn(async move { client.get(&url, &[]).await })
    };
    // SIGTERM once the request is upstream (the upstream has seen it), not after a guess.
    up.wait_seen("/slow").await;
    process.signal("-TERM");
    let reply = in_flight.await.unwrap();
    assert_eq!(
        reply.status, 200,
        "the in-flight request finished: {}",
        reply.body
    );
    let exit = tokio::task::spawn_blocking(move || process.child.wait().unwrap())
        .await
        .unwrap();
    assert!(exit.success(), "exit status {exit}");
    // New connections are refused once it stopped accepting.
    assert!(tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err());
}

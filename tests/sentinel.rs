//! `redis-sentinel://` URLs: the gateway asks a real sentinel for the master and decides there.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::gateway::{self, config};
use support::http::HttpClient;
use support::redis::{RedisServer, Resp};
use support::{free_port, unique_prefix, upstream};

/// A `redis-server --sentinel` process watching one master, killed on drop.
struct Sentinel {
    port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Sentinel {
    /// Starts a sentinel watching `master_port` on a free port: a start that fails because
    /// another process took the port first (the sentinel exits, or the port answers for another
    /// process) is retried on a fresh port, a few times at most.
    fn start(master_port: u16) -> Sentinel {
        const ATTEMPTS: usize = 5;
        let mut failures = Vec::new();
        for _ in 0..ATTEMPTS {
            match Sentinel::try_start(master_port) {
                Ok(sentinel) => return sentinel,
                Err(why) => failures.push(why),
            }
        }
        panic!("the sentinel did not start in {ATTEMPTS} attempts: {failures:?}");
    }

    fn try_start(master_port: u16) -> Result<Sentinel, String> {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!("port {port}\nbind 127.0.0.1\nsentinel monitor main 127.0.0.1 {master_port} 1\nsentinel down-after-milliseconds main 1000\n"),
        )
        .unwrap();
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Killed on drop, also when it does not start.
        let mut sentinel = Sentinel {
            port,
            child,
            _dir: dir,
        };
        let pid = format!("process_id:{}", sentinel.child.id());
        let handle = RedisServer::attach(port);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = sentinel.child.try_wait() {
                return Err(format!("the sentinel on port {port} exited ({status})"));
            }
            if let Ok(Resp::Array(addr)) =
                handle.try_cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "main"])
            {
                if addr.len() == 2 {
                    return match handle.try_cmd(&["INFO", "server"]) {
                        Ok(Resp::Bulk(Some(info))) if info.lines().any(|l| l.trim_end() == pid) => {
                            Ok(sentinel)
                        }
                        _ => Err(format!("port {port} answers for another process")),
                    };
                }
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the sentinel on port {port} did not answer within 10 s"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_run_on_the_master_the_sentinel_names() {
    let master = RedisServer::start_async().await;
    let master_port = master.port;
    let sentinel = tokio::task::spawn_blocking(move || Sentinel::start(master_port))
        .await
        .unwrap();
    let up = upstream::start().await;
    let prefix = unique_prefix("sentinel");
    let store = format!(
        "backend = \"redis\"\nurl = \"redis-sentinel://127.0.0.1:{}/main\"\nkey_prefix = \"{prefix}\"\ntimeout = \"500ms\"\non_error = \"deny\"",
        sentinel.port
    );
    let routes = "[[routes]]\nname = \"r\"\npath = \"/*\"\nupstream = \"up\"\n  [[routes.limits]]\n  name = \"m\"\n  limit = 2\n  window = \"1m\"\n";
    let gw = gateway::start(&config(&store, &up.url(), routes)).await;
    let client = HttpClient::default();
    let mut codes = Vec::new();
    for _ in 0..3 {
        codes.push(client.get(&gw.url("/x"), &[]).await.status.as_u16());
    }
    assert_eq!(codes, [200, 200, 429]);
    // The route's one sliding_log set for the client's key (lua/README.md).
    let key = format!("{prefix}:{{r|127.0.0.1}}#log");
    assert_eq!(
        master.cmd(&["ZCARD", &key]).int(),
        2,
        "the master holds the counts"
    );
}

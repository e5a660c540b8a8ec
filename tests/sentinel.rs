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
    fn start(master_port: u16) -> Sentinel {
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
        let handle = RedisServer::attach(port);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Resp::Array(addr)) =
                handle.try_cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "main"])
            {
                if addr.len() == 2 {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "sentinel did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Sentinel {
            port,
            child,
            _dir: dir,
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
    let master = RedisServer::start();
    let sentinel = Sentinel::start(master.port);
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
    let key = format!("{prefix}:{{r|127.0.0.1}}:m");
    assert_eq!(
        master.cmd(&["ZCARD", &key]).int(),
        2,
        "the master holds the counts"
    );
}

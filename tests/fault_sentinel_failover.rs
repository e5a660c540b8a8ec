//! A Sentinel failover under load (the `sentinel-failover` fault of `bench/faults/run.sh`, shorter,
//! with its goals asserted): while 16 keep-alive clients keep sending requests to a route failing
//! open and one failing closed, the master of a `redis-sentinel://` store (a replica, three
//! sentinels with quorum 2) is killed. The goals are those of `support::load`: every answer
//! explained by the route's `on_error`, none dropped or slower than 2 s, a whole second of
//! decisions starting within 2 s of the sentinels naming the promoted replica, and every request
//! allowed more than a second before the master died (so replicated) still counted on it.
//!
//! The test loads the machine and measures how long things take, so it is the only test of its
//! binary: cargo runs test binaries one after another, never two at once. About 13 s.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::gateway::{self, config};
use support::load::client::{Keys, Load, Outcome};
use support::load::probe::{info, is_master, zcard_on};
use support::load::run::{assert_goals, missing};
use support::load::{routes, store, wait_until};
use support::redis::{RedisServer, Resp};
use support::{free_port, unique_prefix, upstream};

/// A `redis-sentinel://` store whose master is killed: the sentinels promote the replica and the
/// gateway follows it within 2 s of their naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_under_load() {
    let (mut master, replica, sentinels) = tokio::task::spawn_blocking(|| {
        let master = RedisServer::start();
        let port = master.port.to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
        let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(master.port)).collect();
        (master, replica, sentinels)
    })
    .await
    .unwrap();
    wait_until(Duration::from_secs(20), "replica synced", || {
        info(&replica, "replication").contains("master_link_status:up")
    })
    .await;
    wait_until(
        Duration::from_secs(30),
        "sentinels know the replica and each other",
        || sentinels.iter().all(Sentinel::ready),
    )
    .await;
    let up = upstream::start().await;
    let prefix = unique_prefix("fl-sentinel");
    let hosts: Vec<String> = sentinels
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port))
        .collect();
    let url = format!("redis-sentinel://{}/main", hosts.join(","));
    let gw = gateway::start(&config(&store(&url, &prefix), &up.url(), &routes())).await;
    let addr = gw.running().proxy_addr;

    let t0 = Instant::now();
    let load = Load::start(addr, Keys::new(vec!["hot".into()], 0.1));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let killed = Instant::now();
    master.kill();
    let promoted = wait_until(Duration::from_secs(30), "replica promoted", || {
        is_master(&replica)
    })
    .await;
    let named = wait_until(Duration::from_secs(30), "sentinels name it", || {
        sentinels[0].master_port() == Some(replica.port)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let run = load.stop().await;

    run.assert_fault_showed(t0, killed, promoted, |r| r.outcome != Outcome::Decided);
    assert_goals(&run, t0, named, |_| false);
    // What the old master allowed more than a second before it died had replicated.
    let allowed = run.allowed_per_key(&prefix, killed - Duration::from_secs(1));
    let lost = missing(&allowed, |k| zcard_on(&[&replica], k));
    assert!(lost.is_empty(), "allowed requests lost: {lost:?}");
    gw.stop().await;
}

/// A `redis-server --sentinel` watching master `main` with quorum 2, killed on drop.
struct Sentinel {
    port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Sentinel {
    /// Starts one on a free port (retried on a fresh port if another process took it).
    fn start(master_port: u16) -> Sentinel {
        let mut failures = Vec::new();
        for _ in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            let port = free_port();
            let conf = dir.path().join("sentinel.conf");
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor main 127.0.0.1 {master_port} 2\nsentinel down-after-milliseconds main 1000\nsentinel failover-timeout main 5000\n",
                    dir.path().display()
                ),
            )
            .unwrap();
            let child = Command::new("redis-server")
                .arg(&conf)
                .arg("--sentinel")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server must be installed");
            let mut sentinel = Sentinel {
                port,
                child,
                _dir: dir,
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            let pid = format!("process_id:{}", sentinel.child.id());
            loop {
                if let Ok(Some(status)) = sentinel.child.try_wait() {
                    failures.push(format!("exited ({status})"));
                    break;
                }
                let handle = RedisServer::attach(port);
                if let Ok(Resp::Bulk(Some(text))) = handle.try_cmd(&["INFO", "server"]) {
                    if text.lines().any(|l| l.trim_end() == pid) {
                        return sentinel;
                    }
                    failures.push(format!("port {port} answers for another process"));
                    break;
                }
                if Instant::now() >= deadline {
                    failures.push(format!("no answer on {port} within 10 s"));
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("a sentinel did not start: {failures:?}");
    }

    /// Whether it knows the replica and the two other sentinels.
    fn ready(&self) -> bool {
        let Ok(Resp::Array(fields)) =
            RedisServer::attach(self.port).try_cmd(&["SENTINEL", "MASTER", "main"])
        else {
            return false;
        };
        let text: Vec<String> = fields
            .into_iter()
            .map(|f| match f {
                Resp::Bulk(Some(s)) => s,
                _ => String::new(),
            })
            .collect();
        let field = |name: &str| {
            text.iter()
                .position(|f| f == name)
                .and_then(|i| text.get(i + 1))
                .cloned()
        };
        field("num-slaves").as_deref() == Some("1")
            && field("num-other-sentinels").as_deref() == Some("2")
    }

    /// The port of the master it names now.
    fn master_port(&self) -> Option<u16> {
        match RedisServer::attach(self.port).try_cmd(&[
            "SENTINEL",
            "GET-MASTER-ADDR-BY-NAME",
            "main",
        ]) {
            Ok(Resp::Array(addr)) => match addr.get(1) {
                Some(Resp::Bulk(Some(p))) => p.parse().ok(),
                _ => None,
            },
            _ => None,
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

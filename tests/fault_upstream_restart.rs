//! The upstream restarted under load (the `upstream-restart` fault of `bench/faults/run.sh`,
//! shorter, with its goals asserted): while 16 keep-alive clients keep sending requests to a
//! route failing open and one failing closed, the `demo-upstream` binary is killed and started
//! again. The goals are those of `support::load`: every answer explained by the route's
//! `on_error` or, for 502s, by the upstream being down, none dropped or slower than 2 s, 200s
//! again within 2 s of the upstream accepting, and every request the store allowed counted.
//!
//! The test loads the machine and measures how long things take, so it is the only test of its
//! binary: cargo runs test binaries one after another, never two at once. About 7 s.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::gateway::{self, config};
use support::load::client::{Keys, Load, Outcome};
use support::load::probe::zcard_on;
use support::load::run::{assert_goals, missing};
use support::load::{routes, store, RECOVERY};
use support::redis::RedisServer;
use support::{free_port, unique_prefix};

/// The upstream killed and started again: 502s while it is down (none later), the store keeps
/// deciding, and 200s again within 2 s of it accepting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_killed_and_restarted_under_load() {
    let redis = RedisServer::start_async().await;
    let mut up = tokio::task::spawn_blocking(DemoUpstream::start)
        .await
        .unwrap();
    let prefix = unique_prefix("fl-up");
    let gw = gateway::start(&config(&store(&redis.url(), &prefix), &up.url(), &routes())).await;
    let addr = gw.running().proxy_addr;

    let t0 = Instant::now();
    let load = Load::start(addr, Keys::new(vec!["hot".into()], 0.1));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let killed = Instant::now();
    up.kill();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let up = tokio::task::spawn_blocking(move || {
        up.restart();
        up
    })
    .await
    .unwrap();
    let back = Instant::now();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let run = load.stop().await;

    run.assert_fault_showed(t0, killed, back, |r| {
        matches!(r.outcome, Outcome::Status(502))
    });
    // A 502 is explained when it came while the upstream was down, or within the recovery
    // goal after (a connection attempt started just before it came back).
    assert_goals(&run, t0, back, |at| at >= killed && at < back + RECOVERY);
    let allowed = run.allowed_per_key(&prefix, Instant::now());
    let lost = missing(&allowed, |k| zcard_on(&[&redis], k));
    assert!(lost.is_empty(), "allowed requests lost: {lost:?}");
    drop(up);
    gw.stop().await;
}

/// The `demo-upstream` binary on a free port, killed with SIGKILL on request and on drop.
struct DemoUpstream {
    port: u16,
    child: Option<Child>,
}

impl DemoUpstream {
    fn start() -> DemoUpstream {
        for _ in 0..5 {
            let mut up = DemoUpstream {
                port: free_port(),
                child: None,
            };
            if up.spawn() {
                return up;
            }
        }
        panic!("demo-upstream did not start");
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Spawns it on its port and waits (10 s at most) until it accepts; false if it exited.
    fn spawn(&mut self) -> bool {
        let mut child = Command::new(env!("CARGO_BIN_EXE_demo-upstream"))
            .arg(format!("127.0.0.1:{}", self.port))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the demo-upstream binary");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return false;
            }
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                self.child = Some(child);
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn restart(&mut self) {
        self.kill();
        assert!(self.spawn(), "demo-upstream did not start again");
    }
}

impl Drop for DemoUpstream {
    fn drop(&mut self) {
        self.kill();
    }
}

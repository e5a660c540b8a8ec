//! Real `redis-server --sentinel` processes watching master `main` on a free loopback port, for
//! the `redis-sentinel://` tests (`sentinel.rs`, `fault_sentinel_failover.rs`).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;
use super::redis::{RedisServer, Resp};

/// A sentinel process watching master `main`, killed on drop.
pub struct Sentinel {
    /// Its port on 127.0.0.1.
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Sentinel {
    /// Starts a sentinel watching `master_port` with `quorum` (the master is down after 1 s
    /// without an answer), on a free port: a start that fails because another process took the
    /// port first (the sentinel exits, or the port answers for another process) is retried on a
    /// fresh port, a few times at most.
    pub fn start(master_port: u16, quorum: u32) -> Sentinel {
        const ATTEMPTS: usize = 5;
        let mut failures = Vec::new();
        for _ in 0..ATTEMPTS {
            match Sentinel::try_start(master_port, quorum) {
                Ok(sentinel) => return sentinel,
                Err(why) => failures.push(why),
            }
        }
        panic!("the sentinel did not start in {ATTEMPTS} attempts: {failures:?}");
    }

    fn try_start(master_port: u16, quorum: u32) -> Result<Sentinel, String> {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor main 127.0.0.1 {master_port} {quorum}\nsentinel down-after-milliseconds main 1000\nsentinel failover-timeout main 5000\n",
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
            if sentinel.master_port().is_some() {
                return match handle.try_cmd(&["INFO", "server"]) {
                    Ok(Resp::Bulk(Some(info))) if info.lines().any(|l| l.trim_end() == pid) => {
                        Ok(sentinel)
                    }
                    _ => Err(format!("port {port} answers for another process")),
                };
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the sentinel on port {port} did not answer within 10 s"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether it knows `replicas` replicas of the master and `others` other sentinels.
    pub fn knows(&self, replicas: usize, others: usize) -> bool {
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
        field("num-slaves") == Some(replicas.to_string())
            && field("num-other-sentinels") == Some(others.to_string())
    }

    /// The port of the master it names now.
    pub fn master_port(&self) -> Option<u16> {
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

//! The real `slidegate` binary as an operator runs it: spawned with a config file and an
//! environment, its stderr read line by line, killed on drop.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running `slidegate` whose stderr lines arrive in `lines`.
pub struct Process {
    pub child: Child,
    lines: mpsc::Receiver<String>,
}

/// `slidegate --config CONFIG` with the config-related environment cleared, plus `envs`.
pub fn command(config: &Path, envs: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slidegate"));
    cmd.arg("--config")
        .arg(config)
        .env_remove("SLIDEGATE_CONFIG")
        .env_remove("SLIDEGATE_REDIS_URL")
        .env_remove("SLIDEGATE_LOG")
        .env_remove("SLIDEGATE_LOG_FORMAT")
        .envs(envs.iter().copied())
        .stderr(Stdio::piped());
    cmd
}

impl Process {
    /// Runs the gateway with `config` and `envs`.
    pub fn start(config: &Path, envs: &[(&str, &str)]) -> Process {
        Process::spawn(command(config, envs))
    }

    /// Spawns a prepared command (see [`command`]).
    pub fn spawn(mut cmd: Command) -> Process {
        let mut child = cmd.spawn().expect("spawn slidegate");
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Process { child, lines }
    }

    /// Every log line up to and including the first containing `needle`, within 10 s.
    pub fn lines_until(&self, needle: &str) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut seen = Vec::new();
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            let found = line.contains(needle);
            seen.push(line);
            if found {
                return seen;
            }
        }
        panic!(
            "no log line containing {needle:?} within 10 s; got:\n{}",
            seen.join("\n")
        );
    }

    /// Every log line that has arrived and was not read yet.
    pub fn lines_so_far(&self) -> Vec<String> {
        self.lines.try_iter().collect()
    }

    /// The first log line containing `needle`, within 10 s.
    pub fn wait_for(&self, needle: &str) -> String {
        self.lines_until(needle).pop().unwrap()
    }

    /// Waits for the start-up line and returns the proxy and admin addresses it names
    /// (`slidegate listening on ADDR (admin ADDR), store: ...`).
    pub fn listening(&self) -> (SocketAddr, SocketAddr) {
        let line = self.wait_for("listening on");
        let after = line.split("listening on ").nth(1).unwrap();
        let proxy = after.split_whitespace().next().unwrap();
        let admin = after
            .split("(admin ")
            .nth(1)
            .and_then(|s| s.split([')', ',']).next())
            .unwrap();
        (
            proxy.parse().unwrap_or_else(|_| panic!("{line}")),
            admin.parse().unwrap_or_else(|_| panic!("{line}")),
        )
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

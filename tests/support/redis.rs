//! Spawns, kills and restarts real `redis-server` processes, and talks RESP to them directly.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One `redis-server` on 127.0.0.1, killed on drop.
pub struct RedisServer {
    /// Its port.
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    extra: Vec<String>,
}

/// A RESP reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Resp {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<String>),
    Array(Vec<Resp>),
}

impl Resp {
    pub fn int(&self) -> i64 {
        match self {
            Resp::Int(i) => *i,
            other => panic!("expected an integer reply, got {other:?}"),
        }
    }

    /// A bulk or simple string reply's text.
    pub fn text(&self) -> String {
        match self {
            Resp::Bulk(Some(s)) | Resp::Simple(s) => s.clone(),
            other => panic!("expected a string reply, got {other:?}"),
        }
    }
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers PING.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Starts a server with extra arguments (e.g. `--cluster-enabled yes`).
    ///
    /// The port comes from [`super::free_port`], which releases it before `redis-server` binds
    /// it, so another process may take it in between (or, in cluster mode, the bus port 10000
    /// above it). A start that fails that way (the server exits, or the port answers for another
    /// process) is retried on a fresh port, a few times at most.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        const ATTEMPTS: usize = 5;
        let mut failures = Vec::new();
        for _ in 0..ATTEMPTS {
            let mut server = RedisServer {
                port: super::free_port(),
                child: None,
                dir: tempfile::tempdir().expect("temp dir"),
                extra: extra.iter().map(|s| s.to_string()).collect(),
            };
            match server.try_spawn() {
                Ok(()) => return server,
                Err(why) => failures.push(why),
            }
        }
        panic!("redis-server did not start in {ATTEMPTS} attempts: {failures:?}");
    }

    /// Starts a server on a chosen port (panics if the port is taken).
    pub fn start_on(port: u16) -> RedisServer {
        let mut server = RedisServer {
            port,
            child: None,
            dir: tempfile::tempdir().expect("temp dir"),
            extra: Vec::new(),
        };
        server.spawn();
        server
    }

    /// A handle to a server someone else runs (never killed by this handle).
    pub fn attach(port: u16) -> RedisServer {
        RedisServer {
            port,
            child: None,
            dir: tempfile::tempdir().expect("temp dir"),
            extra: Vec::new(),
        }
    }

    fn spawn(&mut self) {
        if let Err(why) = self.try_spawn() {
            panic!("{why}");
        }
    }

    /// Spawns `redis-server` on `self.port` and waits (10 s at most) until it answers PING as
    /// itself: the `process_id` of `INFO server` is the child's, so a port some other process
    /// took in the meantime is never mistaken for ours. On failure the child is gone.
    fn try_spawn(&mut self) -> Result<(), String> {
        let mut child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (the test command installs it)");
        let pid = child.id().to_string();
        let deadline = Instant::now() + Duration::from_secs(10);
        let outcome = loop {
            if let Ok(Some(status)) = child.try_wait() {
                break Err(format!(
                    "redis-server on port {} exited ({status}): port taken?",
                    self.port
                ));
            }
            if let Ok(Resp::Simple(s)) = self.try_cmd(&["PING"]) {
                if s == "PONG" {
                    break match self.try_cmd(&["INFO", "server"]) {
                        Ok(Resp::Bulk(Some(info)))
                            if info
                                .lines()
                                .any(|l| l.trim_end() == format!("process_id:{pid}")) =>
                        {
                            Ok(())
                        }
                        _ => Err(format!(
                            "port {} answers for another process than redis-server {pid}",
                            self.port
                        )),
                    };
                }
            }
            if Instant::now() >= deadline {
                break Err(format!(
                    "redis-server on port {} did not answer within 10 s",
                    self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        match outcome {
            Ok(()) => {
                self.child = Some(child);
                Ok(())
            }
            Err(why) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(why)
            }
        }
    }

    /// `redis://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL) and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops its process (SIGSTOP) without closing its connections: it reads and answers
    /// nothing until [`RedisServer::resume`] (a replica falling behind, a hung node).
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a paused process run again (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, which: &str) {
        let child = self.child.as_ref().expect("a server this handle started");
        let status = Command::new("kill")
            .args([which, &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {which} failed");
    }

    /// Starts it again on the same port (empty: it keeps nothing on disk).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Runs one command and returns its reply, panicking on connection failure.
    pub fn cmd(&self, args: &[&str]) -> Resp {
        self.try_cmd(args)
            .unwrap_or_else(|e| panic!("redis {args:?}: {e}"))
    }

    /// The decision calls (`EVALSHA` and `FCALL`) it has run.
    pub fn decision_calls(&self) -> i64 {
        decision_calls_in(&self.cmd(&["INFO", "commandstats"]))
    }

    /// Runs one command.
    pub fn try_cmd(&self, args: &[&str]) -> std::io::Result<Resp> {
        self.send(args)?.reply()
    }

    /// Writes one command on a connection of its own and returns at once; its reply is read
    /// later ([`SentCommand::reply`]). For a command that blocks Redis (`DEBUG SLEEP`), sent
    /// before the test goes on.
    pub fn send(&self, args: &[&str]) -> std::io::Result<SentCommand> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut out = format!("*{}\r\n", args.len());
        for a in args {
            out.push_str(&format!("${}\r\n{}\r\n", a.len(), a));
        }
        stream.write_all(out.as_bytes())?;
        Ok(SentCommand(BufReader::new(stream)))
    }
}

/// A command written to Redis ([`RedisServer::send`]), its reply still to read.
pub struct SentCommand(BufReader<TcpStream>);

impl SentCommand {
    /// Waits for the reply (at most 5 s).
    pub fn reply(mut self) -> std::io::Result<Resp> {
        read_reply(&mut self.0)
    }
}

/// The decision calls (`EVALSHA` and `FCALL`) counted in a reply to `INFO commandstats`.
pub fn decision_calls_in(info: &Resp) -> i64 {
    let Resp::Bulk(Some(info)) = info else {
        panic!("INFO commandstats failed: {info:?}")
    };
    info.lines()
        .filter_map(|l| {
            l.strip_prefix("cmdstat_evalsha:calls=")
                .or_else(|| l.strip_prefix("cmdstat_fcall:calls="))
        })
        .filter_map(|rest| rest.split(',').next())
        .map(|n| n.parse::<i64>().unwrap())
        .sum()
}

fn read_reply(r: &mut BufReader<TcpStream>) -> std::io::Result<Resp> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let line = line.trim_end_matches("\r\n");
    let (kind, rest) = line.split_at(1.min(line.len()));
    Ok(match kind {
        "+" => Resp::Simple(rest.to_string()),
        "-" => Resp::Error(rest.to_string()),
        ":" => Resp::Int(rest.parse().unwrap_or(0)),
        "$" => {
            let n: i64 = rest.parse().unwrap_or(-1);
            if n < 0 {
                Resp::Bulk(None)
            } else {
                let mut buf = vec![0; n as usize + 2];
                r.read_exact(&mut buf)?;
                buf.truncate(n as usize);
                Resp::Bulk(Some(String::from_utf8_lossy(&buf).into_owned()))
            }
        }
        "*" => {
            let n: i64 = rest.parse().unwrap_or(-1);
            let mut items = Vec::new();
            for _ in 0..n.max(0) {
                items.push(read_reply(r)?);
            }
            Resp::Array(items)
        }
        _ => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("bad reply {line:?}"),
            ))
        }
    })
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

impl RedisServer {
    /// [`RedisServer::start`] for async tests: it waits for the server with sleeps, so it runs
    /// on a blocking thread, off the runtime's workers.
    pub async fn start_async() -> RedisServer {
        tokio::task::spawn_blocking(RedisServer::start)
            .await
            .expect("redis-server starts")
    }
}

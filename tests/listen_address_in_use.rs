//! A listen address another process holds is an error at start: a second slidegate on the same
//! proxy, admin or forward-auth port exits non-zero with "address in use", even though the
//! first one's workers share their ports through `SO_REUSEPORT` (which would let any process of
//! the same user join them), saying so once, in the log's format (a JSON line with JSON logs),
//! plainly when logging is off. The first gateway keeps serving every request.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use support::http::HttpClient;
use support::process::{command, Process};
use support::upstream;

/// A gateway config on these addresses (`0` ports let the system pick), with forward auth.
fn write_config(
    dir: &Path,
    name: &str,
    upstream: &str,
    proxy: u16,
    admin: u16,
    forward_auth: u16,
) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:{proxy}\"\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\
             [store]\nbackend = \"memory\"\n[forward_auth]\nlisten = \"127.0.0.1:{forward_auth}\"\n\
             [upstreams.up]\nurl = \"{upstream}\"\n[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n"
        ),
    )
    .unwrap();
    path
}

/// The address after `label ` in the start-up line.
fn address_after(line: &str, label: &str) -> SocketAddr {
    let after = line.split(label).nth(1).unwrap_or_else(|| panic!("{line}"));
    let text: String = after
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
        .collect();
    text.parse().unwrap_or_else(|_| panic!("{line}"))
}

/// Runs a second gateway on `config` with `env` and returns its exit status and what it wrote,
/// within 10 s.
fn second_gateway(config: &Path, env: &[(&str, &str)]) -> (std::process::ExitStatus, String) {
    let env: Vec<(&str, &str)> = [("TOKIO_WORKER_THREADS", "2")]
        .into_iter()
        .chain(env.iter().copied())
        .collect();
    let mut cmd = command(config, &env);
    cmd.stdout(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the second gateway kept running on ports the first one holds");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status, stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_gateway_on_a_held_port_exits_with_address_in_use() {
    let up = upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let first_config = write_config(dir.path(), "first.toml", &up.url(), 0, 0, 0);
    // Two workers: every proxy and forward-auth socket of the first gateway has SO_REUSEPORT.
    let first = Process::spawn(command(&first_config, &[("TOKIO_WORKER_THREADS", "2")]));
    let line = first.wait_for("listening on");
    let proxy = address_after(&line, "listening on ");
    let admin = address_after(&line, "(admin ");
    let forward_auth = address_after(&line, "forward auth ");

    let held = [
        ("proxy", proxy.port(), 0, 0),
        ("admin", 0, admin.port(), 0),
        ("forward auth", 0, 0, forward_auth.port()),
    ];
    for (which, p, a, f) in held {
        let config = write_config(dir.path(), "second.toml", &up.url(), p, a, f);
        let (status, stderr) = second_gateway(&config, &[]);
        assert!(
            !status.success(),
            "a second gateway on the first one's {which} port started: {stderr}"
        );
        assert_eq!(
            stderr.matches("address in use").count(),
            1,
            "{which}: the error says why, once: {stderr}"
        );
    }
    // JSON logs: the error is a JSON line like every other, said once
    let config = write_config(dir.path(), "second.toml", &up.url(), proxy.port(), 0, 0);
    let (status, stderr) = second_gateway(&config, &[("SLIDEGATE_LOG_FORMAT", "json")]);
    assert!(!status.success(), "{stderr}");
    let lines: Vec<serde_json::Value> = (stderr.lines())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l:?}")))
        .collect();
    let errors: Vec<&serde_json::Value> = (lines.iter())
        .filter(|l| l.to_string().contains("address in use"))
        .collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert_eq!(errors[0]["level"], "ERROR", "{stderr}");
    // logging turned off: the error is still said, plainly
    let (status, stderr) = second_gateway(&config, &[("SLIDEGATE_LOG", "off")]);
    assert!(!status.success(), "{stderr}");
    assert_eq!(stderr.matches("address in use").count(), 1, "{stderr}");

    // The first gateway alone answers on its port, every time.
    let client = HttpClient::default();
    for _ in 0..20 {
        let r = client.get(&format!("http://{proxy}/x"), &[]).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert!(up.seen().len() >= 20);
    drop(first);
}

/// Answers every connection made to `listener` with a 418 until `stop`, and counts them.
fn intruder(
    listener: std::net::TcpListener,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    use std::io::Write;
    use std::sync::atomic::Ordering;
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let mut taken = 0;
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((mut stream, _)) => {
                    taken += 1;
                    let _ = stream.write_all(
                        b"HTTP/1.1 418 stolen\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    );
                }
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
        taken
    })
}

/// One request on a new connection: its status line's code.
fn status_on_new_connection(addr: SocketAddr) -> u16 {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream
        .write_all(b"GET /x HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).unwrap();
    std::str::from_utf8(&head[9..12]).unwrap().parse().unwrap()
}

/// Another program of the same user that joins the proxy port's `SO_REUSEPORT` group after the
/// gateway (an older build, a proxy started with `reuseport`) is never handed a connection: the
/// kernel's own choice would give it about half of them, each client then talking to the wrong
/// server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_that_joins_the_ports_group_later_takes_no_connection() {
    let up = upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "first.toml", &up.url(), 0, 0, 0);
    let gateway = Process::spawn(command(&config, &[("TOKIO_WORKER_THREADS", "2")]));
    let line = gateway.wait_for("listening on");
    let proxy = address_after(&line, "listening on ");

    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_reuse_port(true).unwrap();
    socket
        .bind(&proxy.into())
        .expect("the same user may join the group");
    socket.listen(128).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stealing = intruder(socket.into(), stop.clone());

    let statuses = tokio::task::spawn_blocking(move || {
        (0..40)
            .map(|_| status_on_new_connection(proxy))
            .collect::<Vec<u16>>()
    })
    .await
    .unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let taken = stealing.join().unwrap();
    assert_eq!(taken, 0, "the other program took {taken} of 40 connections");
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    drop(gateway);
}

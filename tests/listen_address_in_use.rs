//! A listen address another process holds is an error at start: a second slidegate on the same
//! proxy, admin or forward-auth port exits non-zero with "address in use", even though the
//! first one's workers share their ports through `SO_REUSEPORT` (which would let any process of
//! the same user join them). The first gateway keeps serving every request.

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

/// Runs a second gateway on `config` and returns its exit status and what it wrote, within 10 s.
fn second_gateway(config: &Path) -> (std::process::ExitStatus, String) {
    let mut cmd = command(config, &[("TOKIO_WORKER_THREADS", "2")]);
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
        let (status, stderr) = second_gateway(&config);
        assert!(
            !status.success(),
            "a second gateway on the first one's {which} port started: {stderr}"
        );
        assert!(
            stderr.contains("address in use"),
            "{which}: the error says why: {stderr}"
        );
    }

    // The first gateway alone answers on its port, every time.
    let client = HttpClient::default();
    for _ in 0..20 {
        let r = client.get(&format!("http://{proxy}/x"), &[]).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert!(up.seen().len() >= 20);
    drop(first);
}

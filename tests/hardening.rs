//! Request hardening on the proxy listener: request heads are bounded (431 with a problem body,
//! nothing forwarded), slow heads are cut after `server.header_read_timeout`, open connections
//! are bounded by `server.max_connections`, the open-file limit is raised at start, conflicting
//! framing never reaches the upstream, and a client's `Connection` header cannot remove the
//! headers the gateway sets.

mod support;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use support::gateway::{self, config, with_server};
use support::problem::assert_problem;
use support::{raw, upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MEMORY: &str = "backend = \"memory\"";
const ALL: &str = "[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n";

/// `n` header lines `X-Hn: v`.
fn header_lines(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("X-H{i}: v")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_over_the_bounds_get_431_problems_and_never_reach_the_upstream() {
    let up = upstream::start().await;
    let gw = gateway::start(&with_server(
        &config(MEMORY, &up.url(), ALL),
        "max_header_bytes = 2048\nmax_headers = 10",
    ))
    .await;
    let addr = gw.running().proxy_addr;

    // Bytes: a 1,500-byte field fits in 2,048; a 2,100-byte one does not.
    let fits = format!("X-Filler: {}", "a".repeat(1500));
    assert_eq!(
        raw::request(addr, "GET", "/bytes-fit", &[&fits])
            .await
            .status,
        200
    );
    let over = format!("X-Filler: {}", "a".repeat(2100));
    let r = raw::request(addr, "GET", "/bytes-over", &[&over]).await;
    let body = assert_problem(&r, 431, "request_head_too_large");
    assert!(
        body["detail"].as_str().unwrap().contains("2048 bytes"),
        "{body}"
    );

    // Fields: the raw request carries Host, Connection and Content-Length, so 7 more make
    // exactly 10 (allowed) and 8 more make 11 (refused).
    let seven = header_lines(7);
    let seven: Vec<&str> = seven.iter().map(String::as_str).collect();
    assert_eq!(
        raw::request(addr, "GET", "/fields-fit", &seven)
            .await
            .status,
        200
    );
    let eight = header_lines(8);
    let eight: Vec<&str> = eight.iter().map(String::as_str).collect();
    let r = raw::request(addr, "GET", "/fields-over", &eight).await;
    let body = assert_problem(&r, 431, "request_head_too_large");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("11 header fields"),
        "{body}"
    );

    assert_eq!(
        up.seen(),
        ["/bytes-fit", "/fields-fit"],
        "refused heads never reach the upstream"
    );
}

/// Reads until the server closes the connection (EOF or reset); what it sent first is ignored.
async fn read_until_closed(stream: &mut TcpStream) {
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => continue,
        }
    }
}

/// The gateway runs on this test's runtime with paused time, so hyper's header timer runs on
/// virtual time: the cut comes at exactly `header_read_timeout`, whatever the machine's load.
#[tokio::test(start_paused = true)]
async fn a_slow_head_is_cut_at_the_header_read_timeout_and_not_before() {
    let up = upstream::start().await;
    let gw = gateway::start(&with_server(
        &config(MEMORY, &up.url(), ALL),
        "header_read_timeout = \"2s\"",
    ))
    .await;
    let mut stream = TcpStream::connect(gw.running().proxy_addr).await.unwrap();
    let started = tokio::time::Instant::now();
    stream
        .write_all(b"GET /slow-head HTTP/1.1\r\nHost: x\r\nX-Part: 1\r\n")
        .await
        .unwrap();

    let mut buf = [0u8; 1024];
    let early = tokio::time::timeout(Duration::from_millis(1990), stream.read(&mut buf)).await;
    assert!(
        early.is_err(),
        "the connection ended after {:?}, before the 2 s timeout: {early:?}",
        started.elapsed()
    );
    tokio::time::timeout(Duration::from_secs(60), read_until_closed(&mut stream))
        .await
        .expect("the slow head is cut within 60 s of virtual time");
    let cut_after = started.elapsed();
    assert!(
        cut_after >= Duration::from_secs(2) && cut_after < Duration::from_millis(2100),
        "cut after {cut_after:?}, expected 2 s"
    );
    assert!(up.seen().is_empty(), "{:?}", up.seen());
}

/// The drain waits for requests in flight, not for a connection that has sent nothing (an HTTP
/// client's spare pooled connection is one): shutdown ends at once, not at header_read_timeout
/// or shutdown_grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_does_not_wait_for_a_connection_that_sent_nothing() {
    let up = upstream::start().await;
    let gw = gateway::start(&with_server(
        &config(MEMORY, &up.url(), ALL),
        "header_read_timeout = \"30s\"\nshutdown_grace = \"30s\"",
    ))
    .await;
    let silent = TcpStream::connect(gw.running().proxy_addr).await.unwrap();
    // A request through another connection proves the listener has been serving since (the
    // silent connection was accepted before it: one listener per worker, but each accepts in
    // order, and a proxied answer takes several round trips).
    for _ in 0..4 {
        let mut other = TcpStream::connect(gw.running().proxy_addr).await.unwrap();
        other
            .write_all(b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        read_until_closed(&mut other).await;
    }
    tokio::time::timeout(Duration::from_secs(5), gw.stop())
        .await
        .expect("shutdown does not wait for a connection that sent nothing");
    drop(silent);
}

/// A client that connects and sends nothing at all is the slowest head there is; it must not
/// hold one of the `max_connections` slots for longer than `header_read_timeout`.
///
/// Real time here, not paused: with paused time the runtime may go idle before the server has
/// seen the connection, and virtual time then jumps past the cut. The clock starts before the
/// connect, since the server's cannot start earlier (the connection does not exist yet), so the
/// lower bound is exact: the cut never comes early. The upper one is generous and only says the
/// cut comes at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_sends_nothing_is_cut_at_the_header_read_timeout() {
    let up = upstream::start().await;
    let gw = gateway::start(&with_server(
        &config(MEMORY, &up.url(), ALL),
        "header_read_timeout = \"400ms\"",
    ))
    .await;
    let started = std::time::Instant::now();
    let mut stream = TcpStream::connect(gw.running().proxy_addr).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), read_until_closed(&mut stream))
        .await
        .expect("a silent connection is cut");
    let cut_after = started.elapsed();
    assert!(
        cut_after >= Duration::from_millis(400),
        "cut after {cut_after:?}, before the 400 ms header_read_timeout"
    );
}

/// A keep-alive HTTP/1.1 connection to `addr`: its sender, and the task driving it.
async fn open(
    addr: std::net::SocketAddr,
) -> (
    http1::SendRequest<Empty<Bytes>>,
    tokio::task::JoinHandle<()>,
) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = http1::handshake(TokioIo::new(stream)).await.unwrap();
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    (sender, task)
}

fn get(path: &str) -> http::Request<Empty<Bytes>> {
    http::Request::get(path)
        .header("host", "gw")
        .body(Empty::new())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_max_connections_a_new_connection_waits_until_one_closes() {
    let up = upstream::start().await;
    let gw = gateway::start(&with_server(
        &config(MEMORY, &up.url(), ALL),
        "max_connections = 2",
    ))
    .await;
    let addr = gw.running().proxy_addr;

    // Two connections, each answered once, then open and idle: both slots are taken.
    let (mut first, first_task) = open(addr).await;
    let (mut second, _second_task) = open(addr).await;
    for (sender, path) in [(&mut first, "/first"), (&mut second, "/second")] {
        let r = tokio::time::timeout(Duration::from_secs(5), sender.send_request(get(path)))
            .await
            .expect("answered within 5 s")
            .unwrap();
        assert_eq!(r.status(), 200);
        r.into_body().collect().await.unwrap();
    }

    // A third connects (the kernel's backlog takes it) but is not served.
    let (mut third, _third_task) = open(addr).await;
    let mut answer = Box::pin(third.send_request(get("/third")));
    let early = tokio::time::timeout(Duration::from_millis(300), &mut answer).await;
    assert!(
        early.is_err(),
        "a third connection was served while two were open: {early:?}"
    );
    assert!(!up.seen().contains(&"/third".to_string()));

    // One of the first two closes: the third is served.
    first_task.abort();
    drop(first);
    let r = tokio::time::timeout(Duration::from_secs(5), answer)
        .await
        .expect("the waiting connection is served within 5 s of a slot freeing")
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(up.seen().contains(&"/third".to_string()));
}

/// The soft limit of open files in `/proc/PID/limits`.
fn soft_open_files(pid: u32) -> u64 {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace().nth(3).unwrap().parse().unwrap()
}

#[test]
fn the_binary_raises_its_open_file_soft_limit_to_the_hard_limit() {
    use std::os::unix::process::CommandExt;

    let mut hard = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct it is given.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut hard) },
        0
    );
    const LOWERED: u64 = 256;
    assert!(
        hard.rlim_max > LOWERED,
        "the hard limit ({}) leaves no room to raise a lowered soft limit",
        hard.rlim_max
    );
    let hard = hard.rlim_max;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(
        &path,
        config(
            MEMORY,
            &format!("http://127.0.0.1:{}", support::free_port()),
            ALL,
        ),
    )
    .unwrap();
    let mut cmd = support::process::command(&path, &[]);
    // SAFETY: between fork and exec only setrlimit runs, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            let lowered = libc::rlimit {
                rlim_cur: LOWERED as libc::rlim_t,
                rlim_max: hard,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lowered) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let process = support::process::Process::spawn(cmd);
    process.listening();
    assert_eq!(
        soft_open_files(process.pid()),
        hard,
        "started with a soft limit of {LOWERED}, it runs with the hard limit"
    );
}

/// The classic CL.TE smuggle: a front end that believed `Content-Length` would pass the second
/// request along inside the first one's body. Here `Transfer-Encoding` wins, the body is the
/// empty chunked one, and the connection is closed after the answer, so the smuggled request is
/// never served and the upstream never sees both framing headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_smuggled_behind_conflicting_framing_never_reaches_the_upstream() {
    let up = upstream::start().await;
    let gw = gateway::start(&config(MEMORY, &up.url(), ALL)).await;
    let smuggled = "0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n";
    let request = format!(
        "POST /front HTTP/1.1\r\nHost: gw\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n{smuggled}",
        smuggled.len()
    );
    let r = raw::send(gw.running().proxy_addr, request.as_bytes()).await;
    assert!(
        !r.head.contains("/smuggled") && !r.body.contains("/smuggled"),
        "{r:?}"
    );
    let seen = up.seen();
    assert!(
        !seen.iter().any(|t| t.contains("smuggled")),
        "the smuggled request reached the upstream: {seen:?}"
    );
    if r.status == 200 {
        let headers = &r.json()["headers"];
        assert!(
            headers.get("content-length").is_none() || headers.get("transfer-encoding").is_none(),
            "the upstream got both framing headers: {headers}"
        );
    }
}

/// What the upstream received, from its JSON echo.
fn upstream_headers(r: &raw::RawReply) -> serde_json::Value {
    assert_eq!(r.status, 200, "{r:?}");
    r.json()["headers"].clone()
}

const NAMES_THE_GATEWAY_SETS: &str =
    "close, X-Forwarded-For, X-Forwarded-Proto, X-Forwarded-Host, X-Request-Id";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_header_cannot_remove_the_headers_the_gateway_sets() {
    let up = upstream::start().await;
    let untrusted = gateway::start(&config(MEMORY, &up.url(), ALL)).await;
    let trusted = gateway::start(&with_server(
        &config(MEMORY, &up.url(), ALL),
        "trusted_proxies = [\"127.0.0.1/32\"]",
    ))
    .await;
    let request = format!(
        "GET /conn HTTP/1.1\r\nHost: api.example\r\nConnection: {NAMES_THE_GATEWAY_SETS}\r\n\
         X-Forwarded-For: 198.51.100.1\r\nX-Forwarded-Proto: https\r\n\
         X-Forwarded-Host: public.example\r\nX-Request-Id: trace-abc\r\n\r\n"
    );

    // From an untrusted peer the gateway replaces all four with its own values.
    let r = raw::send(untrusted.running().proxy_addr, request.as_bytes()).await;
    let h = upstream_headers(&r);
    assert_eq!(h["x-forwarded-for"], "127.0.0.1", "{h}");
    assert_eq!(h["x-forwarded-proto"], "http", "{h}");
    assert_eq!(h["x-forwarded-host"], "api.example", "{h}");
    let id = r.header("x-request-id").unwrap();
    assert_ne!(id, "trace-abc");
    assert_eq!(h["x-request-id"], id, "{h}");

    // From a trusted proxy it keeps theirs and appends the peer, as without `Connection`.
    let r = raw::send(trusted.running().proxy_addr, request.as_bytes()).await;
    let h = upstream_headers(&r);
    assert_eq!(h["x-forwarded-for"], "198.51.100.1, 127.0.0.1", "{h}");
    assert_eq!(h["x-forwarded-proto"], "https", "{h}");
    assert_eq!(h["x-forwarded-host"], "public.example", "{h}");
    assert_eq!(h["x-request-id"], "trace-abc", "{h}");
    assert_eq!(r.header("x-request-id"), Some("trace-abc"));
}

/// hyper's own head bounds are set at start from `max_header_bytes` (twice it, at least 16 KiB);
/// the gateway's 431 check reads the reloaded value. A reload that raises the bound must either
/// apply (the larger head is forwarded) or be reported as needing a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_raises_max_header_bytes_applies_or_is_pending_a_restart() {
    let up = upstream::start().await;
    let base = config(MEMORY, &up.url(), ALL);
    let gw = gateway::start(&with_server(&base, "max_header_bytes = 1024")).await;
    gw.rewrite(&with_server(&base, "max_header_bytes = 65536"));
    let pending = gw.running().state.reload().expect("the file is valid");
    let named = pending
        .iter()
        .any(|p| p.setting == "server.max_header_bytes");
    let head = format!("X-Filler: {}", "a".repeat(20_000));
    let r = raw::request(gw.running().proxy_addr, "GET", "/20k", &[&head]).await;
    assert!(
        r.status == 200 || named,
        "a 20 KB head after raising the bound to 64 KiB: {} {}, pending {pending:?}",
        r.status,
        r.head
    );
}

/// Requests hyper refuses before the gateway sees them (a request line that is not HTTP, a head
/// beyond hyper's own buffer) get the same problem body as every other error, with a request id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_hyper_cannot_parse_get_a_problem_body() {
    let up = upstream::start().await;
    let gw = gateway::start(&with_server(
        &config(MEMORY, &up.url(), ALL),
        "max_header_bytes = 1024",
    ))
    .await;
    let addr = gw.running().proxy_addr;

    let r = raw::send(addr, b"THIS IS NOT HTTP\r\n\r\n").await;
    let body = assert_problem(&r, 400, "malformed_request");
    assert_eq!(r.header("x-request-id"), body["request_id"].as_str());

    let r = raw::send(
        addr,
        b"GET /x HTTP/1.1\r\nHost: gw\r\nBad Header Line\r\n\r\n",
    )
    .await;
    assert_problem(&r, 400, "malformed_request");

    // Far beyond the gateway's own bound (1 KiB): hyper's buffer (16 KiB) refuses it first.
    let head = format!(
        "GET /x HTTP/1.1\r\nHost: gw\r\nX-Filler: {}\r\n\r\n",
        "a".repeat(40_000)
    );
    let r = raw::send(addr, head.as_bytes()).await;
    assert_problem(&r, 431, "request_head_too_large");
    assert!(up.seen().is_empty(), "{:?}", up.seen());
    gw.stop().await;
}

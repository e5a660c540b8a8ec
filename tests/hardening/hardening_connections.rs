//! Connections to the proxy listener cannot be held for free: a slow head is cut after
//! `server.header_read_timeout` and not before, a connection that sends nothing is cut likewise and
//! does not hold up the drain at shutdown, and open connections are bounded by
//! `server.max_connections` (a new one waits until one closes).

use crate::support;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use support::gateway::{self, config, with_server};
use support::hardening::{ALL, MEMORY};
use support::upstream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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

/// An HTTP/2 client that sends the preface (whole, or half of it) and then no request is held
/// to `header_read_timeout` as a slow HTTP/1 head is, not to `idle_timeout` (twice, for a client
/// that ignores GOAWAY): a slot of `max_connections` is not that cheap to hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_connection_without_a_request_is_cut_at_the_header_read_timeout() {
    let up = upstream::start().await;
    let gw = gateway::start(&with_server(
        &config(MEMORY, &up.url(), ALL),
        "header_read_timeout = \"400ms\"\nidle_timeout = \"30s\"",
    ))
    .await;
    for preface in [
        &b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..],
        b"PRI * HTTP/2.0\r\n",
    ] {
        let started = std::time::Instant::now();
        let mut stream = TcpStream::connect(gw.running().proxy_addr).await.unwrap();
        stream.write_all(preface).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), read_until_closed(&mut stream))
            .await
            .expect("a connection with no request is cut within 10 s, not at idle_timeout");
        let cut_after = started.elapsed();
        assert!(
            cut_after >= Duration::from_millis(400),
            "cut after {cut_after:?}, before the 400 ms header_read_timeout"
        );
    }
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

//! Connections a hostile client holds or abuses (README, "The traffic path"): idle HTTP/1.1 keep-alive and
//! idle HTTP/2 connections are closed after `idle_timeout` (a client deaf to the shutdown a
//! period later), `max_connections` bounds the whole
//! process (every worker together), upstream bytes that look like an error head reach the
//! client unchanged, and a long upload is not cut by the upstream's `timeout`, which starts
//! once the body has been sent. (HTTP/2 rapid resets: `hostile_http2_resets.rs`.)

use crate::support;

use std::convert::Infallible;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::gateway::{self, config, with_server};
use support::process::Process;
use support::{raw, upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MEMORY: &str = "backend = \"memory\"";
const ALL: &str = "[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n";

/// Reads until the server closes; `true` when it did within `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let read = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(within, read).await.is_ok()
}

/// A keep-alive connection with no request in flight is closed after `idle_timeout`, not after
/// `header_read_timeout` (which times heads being sent), and not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_after_idle_timeout() {
    let up = upstream::start().await;
    let toml = with_server(
        &config(MEMORY, &up.url(), ALL),
        "idle_timeout = \"800ms\"\nheader_read_timeout = \"200ms\"",
    );
    let gw = gateway::start(&toml).await;
    let mut stream = TcpStream::connect(gw.running().proxy_addr).await.unwrap();
    // the gateway's idle time starts when it has answered, which is after this instant and
    // before the answer reaches this side
    let idle_from = Instant::now();
    stream
        .write_all(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 1024];
    let n = stream.read(&mut first).await.unwrap();
    assert!(first[..n].starts_with(b"HTTP/1.1 200"));
    // not cut at the head timeout: the connection is idle, not sending a head
    assert!(!closed_within(&mut stream, Duration::from_millis(500)).await);
    assert!(closed_within(&mut stream, Duration::from_secs(10)).await);
    assert!(idle_from.elapsed() >= Duration::from_millis(800));
    gw.stop().await;
}

/// An HTTP/2 connection (prior knowledge) with no open stream is shut down after
/// `idle_timeout`: sixty idle sockets no longer hold the gateway forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_connection_is_closed_after_idle_timeout() {
    let up = upstream::start().await;
    let toml = with_server(&config(MEMORY, &up.url(), ALL), "idle_timeout = \"500ms\"");
    let gw = gateway::start(&toml).await;
    let stream = TcpStream::connect(gw.running().proxy_addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    let driven = tokio::spawn(conn);
    let req = Request::builder()
        .uri("http://x/h2")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender.send_request(req).await.unwrap();
    assert_eq!(response.status(), 200);
    drop(response);
    let ended = tokio::time::timeout(Duration::from_secs(10), driven).await;
    assert!(ended.is_ok(), "an idle h2 connection stayed open");
    gw.stop().await;
}

/// An HTTP/2 client that never answers (no SETTINGS ack, no PING ack, deaf to GOAWAY) is closed
/// a period after the graceful shutdown it ignored, instead of holding its socket for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deaf_http2_client_is_closed_after_ignoring_the_shutdown() {
    let up = upstream::start().await;
    let toml = with_server(&config(MEMORY, &up.url(), ALL), "idle_timeout = \"500ms\"");
    let gw = gateway::start(&toml).await;
    let mut stream = TcpStream::connect(gw.running().proxy_addr).await.unwrap();
    // the preface and an empty SETTINGS frame; then nothing, ever
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    stream.write_all(&hello).await.unwrap();
    let read_to_end = async {
        let mut buf = [0u8; 1024];
        while stream.read(&mut buf).await.is_ok_and(|n| n > 0) {}
    };
    let closed = tokio::time::timeout(Duration::from_secs(10), read_to_end).await;
    assert!(closed.is_ok(), "a deaf h2 client kept its connection");
    gw.stop().await;
}

/// `max_connections` is the whole process's: with two workers and a bound of 2, a third
/// connection waits until one closes, whichever worker accepted the first two.
#[test]
fn max_connections_bounds_every_worker_together() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let up = rt.block_on(upstream::start());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    let toml = with_server(&config(MEMORY, &up.url(), ALL), "max_connections = 2");
    std::fs::write(&path, toml).unwrap();
    let gw = Process::start(&path, &[("TOKIO_WORKER_THREADS", "2")]);
    let (addr, _) = gw.listening();
    rt.block_on(async {
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET /held HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            let mut buf = [0u8; 512];
            let n = s.read(&mut buf).await.unwrap();
            assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
            held.push(s);
        }
        let mut third = TcpStream::connect(addr).await.unwrap();
        third
            .write_all(b"GET /third HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        let early = tokio::time::timeout(Duration::from_millis(700), third.read(&mut buf)).await;
        assert!(
            early.is_err(),
            "a third connection was served beyond max_connections"
        );
        drop(held.pop());
        let n = tokio::time::timeout(Duration::from_secs(10), third.read(&mut buf))
            .await
            .expect("served once a slot freed")
            .unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    });
}

/// An upstream that answers `/heads` with a body whose chunks each begin like an error head
/// without `x-request-id`, and `/upload` only once it has read the whole request body.
async fn tricky_upstream() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|req: Request<Incoming>| async move {
                    if req.uri().path() == "/upload" {
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let text = format!("got {} bytes", body.len());
                        let body = Full::new(Bytes::from(text)).map_err(|n| match n {}).boxed();
                        return Ok::<_, Infallible>(Response::new(body));
                    }
                    let chunks = HEAD_LIKE_CHUNKS.iter().map(|c| {
                        Ok::<_, Infallible>(Frame::data(Bytes::from_static(c.as_bytes())))
                    });
                    let length: usize = HEAD_LIKE_CHUNKS.iter().map(|c| c.len()).sum();
                    let stream = futures_util::stream::iter(chunks).then(|c| async move {
                        tokio::time::sleep(Duration::from_millis(30)).await;
                        c
                    });
                    let mut response = Response::new(BodyExt::boxed(StreamBody::new(stream)));
                    response
                        .headers_mut()
                        .insert("content-length", length.into());
                    Ok(response)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (url, task)
}

use futures_util::StreamExt;

const HEAD_LIKE_CHUNKS: [&str; 3] = [
    "HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n",
    "HTTP/1.0 503 Service Unavailable\r\n\r\n",
    "HTTP/1.1 431 Request Header Fields Too Large\r\n\r\n",
];

/// Only the gateway's own heads are rewritten: an upstream body whose chunks start like an
/// error head reaches the client byte for byte, and the connection stays in sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_bytes_that_look_like_an_error_head_arrive_unchanged() {
    let (url, task) = tricky_upstream().await;
    let gw = gateway::start(&config(MEMORY, &url, ALL)).await;
    let addr = gw.running().proxy_addr;
    let r = raw::send(
        addr,
        b"GET /heads HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, HEAD_LIKE_CHUNKS.concat());
    task.abort();
    gw.stop().await;
}

/// An upload that takes longer than the upstream's `timeout` is not cut: the timeout starts
/// once the body has been sent (README, "The traffic path"), and the upstream answered at once after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_upload_is_not_cut_by_the_upstream_timeout() {
    let (url, task) = tricky_upstream().await;
    let toml = config(MEMORY, &url, ALL).replace("timeout = \"2s\"", "timeout = \"300ms\"");
    let gw = gateway::start(&toml).await;
    let mut stream = TcpStream::connect(gw.running().proxy_addr).await.unwrap();
    stream
        .write_all(
            b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nConnection: close\r\n\r\n",
        )
        .await
        .unwrap();
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        stream.write_all(b"xxxxx").await.unwrap();
    }
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    let reply = raw::parse(&out);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body, "got 40 bytes");
    task.abort();
    gw.stop().await;
}

//! Connecting to upstreams: a connect that fails is retried until the upstream's
//! `connect_timeout` is spent (nothing of the request has been sent, so a retry is safe), then
//! the request gets 502; and the default `connect_timeout` (3 s) outlives one SYN
//! retransmission, so a burst against an upstream whose listen backlog overflows is slowed down,
//! not answered with 502s. An upstream that is not up yet is a port held by a socket that does
//! not listen (connects are refused) and later listens on it, so no other process can take the
//! port in between.

use crate::support;

use std::time::Duration;

use support::gateway::{self, config};
use support::http::HttpClient;
use support::upstream;
use tokio::net::TcpSocket;

const MEMORY: &str = "backend = \"memory\"";
const ALL: &str = "[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n";
const SUPPORT_TIMEOUTS: &str = "connect_timeout = \"500ms\"\ntimeout = \"2s\"\n";

/// A config whose upstream `up` has these timeout lines instead of the support defaults.
fn with_upstream_timeouts(upstream_url: &str, timeouts: &str) -> String {
    let cfg = config(MEMORY, upstream_url, ALL);
    assert!(cfg.contains(SUPPORT_TIMEOUTS));
    cfg.replace(SUPPORT_TIMEOUTS, timeouts)
}

/// A gateway whose upstream port is held but not listened on yet (a connect is refused, as to
/// an upstream that is not up), with `connect_timeout`; the port's socket, to listen on later.
async fn gateway_before_the_upstream_listens(
    connect_timeout: &str,
) -> (gateway::Gateway, tokio::net::TcpSocket) {
    let (socket, port) = support::reserved_port();
    let gw = gateway::start(&with_upstream_timeouts(
        &format!("http://127.0.0.1:{port}"),
        &format!("connect_timeout = \"{connect_timeout}\"\n"),
    ))
    .await;
    (gw, socket)
}

/// Sends a GET for `path` through the gateway in a task of its own.
fn send(gw: &gateway::Gateway, path: &str) -> tokio::task::JoinHandle<u16> {
    let client = HttpClient::default();
    let url = gw.url(path);
    tokio::spawn(async move { client.get(&url, &[]).await.status.as_u16() })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_starts_listening_late_still_answers_within_connect_timeout() {
    let (gw, socket) = gateway_before_the_upstream_listens("3s").await;
    let request = send(&gw, "/late");
    // Refused for 300 ms, then the upstream listens on the same socket.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let up = upstream::serve(socket.listen(1024).unwrap(), Duration::ZERO);
    assert_eq!(
        request.await.unwrap(),
        200,
        "the connect was retried until the upstream listened"
    );
    assert_eq!(up.seen(), ["/late"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_starts_after_connect_timeout_is_a_502() {
    let (gw, socket) = gateway_before_the_upstream_listens("100ms").await;
    // The upstream listens only once the gateway has given up: the retries stop when
    // connect_timeout is spent. 2 s is a liveness bound, twenty times connect_timeout and less
    // than the default 3 s, which a gateway ignoring the setting would wait.
    let status = tokio::time::timeout(Duration::from_secs(2), send(&gw, "/too-late"))
        .await
        .expect("the gateway gave up connecting")
        .unwrap();
    assert_eq!(status, 502);
    let up = upstream::serve(socket.listen(1024).unwrap(), Duration::ZERO);
    // It answers now, and never received the request that gave up.
    assert_eq!(send(&gw, "/now").await.unwrap(), 200);
    assert_eq!(up.seen(), ["/now"]);
}

/// An upstream with a listen backlog of 1 that accepts nothing for its first 200 ms: a burst
/// of new connections meanwhile overflows the backlog, and the kernel drops the SYNs that do
/// not fit (the client retransmits them after 1 s).
fn busy_upstream() -> upstream::Upstream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    upstream::serve(listener, Duration::from_millis(200))
}

/// 12 concurrent requests through a fresh gateway (so each needs a new upstream connection);
/// the statuses. (Not more: the connections whose handshake completes while the backlog is
/// full get in two at a time on the client's retransmission timer, 0.2 s, 0.4 s, 0.8 s... apart,
/// a tail that has nothing to do with `connect_timeout` and only makes the test slow.)
async fn burst(timeouts: &str) -> Vec<u16> {
    let up = busy_upstream();
    let gw = gateway::start(&with_upstream_timeouts(&up.url(), timeouts)).await;
    let urls = (0..12).map(|i| gw.url(&format!("/burst-{i}"))).collect();
    let results = HttpClient::default().get_concurrently(urls).await;
    results.into_iter().map(|(status, _)| status).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_against_an_overflowing_backlog_gets_no_502_with_the_default_connect_timeout() {
    // The same burst with a connect timeout shorter than one SYN retransmission does see 502s:
    // the backlog really overflows.
    let short = burst("connect_timeout = \"300ms\"\n").await;
    assert!(
        short.contains(&502),
        "the backlog never overflowed, so this test shows nothing: {short:?}"
    );
    // The default (no connect_timeout, no timeout line) waits the retransmission out.
    let default = burst("").await;
    assert!(
        default.iter().all(|&s| s == 200),
        "with the default connect_timeout: {default:?}"
    );
}

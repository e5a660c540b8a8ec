//! Connecting to upstreams: a connect that fails is retried until the upstream's
//! `connect_timeout` is spent (nothing of the request has been sent, so a retry is safe), and the
//! default `connect_timeout` (3 s) outlives one SYN retransmission, so a burst against an
//! upstream whose listen backlog overflows is slowed down, not answered with 502s.

mod support;

use std::time::Duration;

use support::gateway::{self, config};
use support::http::HttpClient;
use support::upstream;
use tokio::net::{TcpListener, TcpSocket};

const MEMORY: &str = "backend = \"memory\"";
const ALL: &str = "[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n";
const SUPPORT_TIMEOUTS: &str = "connect_timeout = \"500ms\"\ntimeout = \"2s\"\n";

/// A config whose upstream `up` has these timeout lines instead of the support defaults.
fn with_upstream_timeouts(upstream_url: &str, timeouts: &str) -> String {
    let cfg = config(MEMORY, upstream_url, ALL);
    assert!(cfg.contains(SUPPORT_TIMEOUTS));
    cfg.replace(SUPPORT_TIMEOUTS, timeouts)
}

/// Sends a GET for `path` to a gateway whose upstream listens only from 300 ms later on, and
/// returns its status and what the upstream then received.
async fn request_before_the_upstream_listens(
    connect_timeout: &str,
    path: &str,
) -> (u16, Vec<String>) {
    let port = support::free_port();
    let gw = gateway::start(&with_upstream_timeouts(
        &format!("http://127.0.0.1:{port}"),
        &format!("connect_timeout = \"{connect_timeout}\"\n"),
    ))
    .await;
    let client = HttpClient::default();
    let url = gw.url(path);
    let request = tokio::spawn(async move { client.get(&url, &[]).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let up = upstream::serve(listener, Duration::ZERO);
    let reply = request.await.unwrap();
    (reply.status.as_u16(), up.seen())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_starts_listening_late_still_answers_within_connect_timeout() {
    let (status, seen) = request_before_the_upstream_listens("3s", "/late").await;
    assert_eq!(
        status, 200,
        "the connect was retried until the upstream listened"
    );
    assert_eq!(seen, ["/late"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_starts_after_connect_timeout_is_a_502() {
    let (status, seen) = request_before_the_upstream_listens("100ms", "/too-late").await;
    assert_eq!(status, 502);
    assert!(seen.is_empty(), "{seen:?}");
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

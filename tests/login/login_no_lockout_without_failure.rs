//! No lockout without a failure, on the recipe `examples/login.toml` as written (real Redis,
//! real sockets): a client opens ten login attempts for someone else's account at once and
//! leaves before any reaches the upstream. The five the limit admits are reservations in
//! flight; the five it refuses meanwhile are plain 429s (their `Retry-After` at most the
//! upstream's timeout), not the start of a block; once the five leave, their reservations are
//! refunded and nothing is left: the owner is not blocked, no block was started, no level kept.
//! Over HTTP/2 (ten streams in one write, then RST_STREAM on each) and HTTP/1.1 (ten
//! connections, then closed).
//!
//! The upstream is a listener whose accept queue is full: the gateway's connections to it hang
//! in their handshake, so no attempt reaches it, and the moment the clients leave is certain.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use support::recipes::Recipe;
use support::redis::RedisServer;

const BODY: &str = r#"{"username":"%USER%","password":"guess"}"#;
/// The recipe's upstream has no timeouts of its own: connect 3 s, answer 10 s. A reservation
/// stays in flight up to those and a second, but a refusal on it tells at most the answer's
/// timeout.
const TIMEOUT_SECS: u64 = 10;

/// A loopback listener that takes no connection: its accept queue (length 0) holds the one it
/// was given, so every other SYN is dropped and a connection attempt hangs.
struct FullListener {
    addr: SocketAddr,
    _socket: socket2::Socket,
    _queued: std::net::TcpStream,
}

fn full_listener() -> FullListener {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket
        .bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    socket.listen(0).unwrap();
    let addr = socket.local_addr().unwrap().as_socket().unwrap();
    let queued = std::net::TcpStream::connect(addr).unwrap();
    FullListener {
        addr,
        _socket: socket,
        _queued: queued,
    }
}

/// The account's failed-logins usage and block as `/admin/usage` reports them, once its
/// reservations are settled (used back to 0, waiting up to 10 s).
async fn settled_usage(gw: &Recipe, user: &str) -> serde_json::Value {
    for _ in 0..500 {
        let usage = gw
            .admin_get_patiently(&format!(
                "/admin/usage?route=login&key={user}&limit=failed-logins"
            ))
            .await;
        if usage["limits"][0]["used"] == 0 {
            return usage;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{user}'s reservations were never refunded");
}

/// What must hold after the attack on `user`: nothing counted, no block, no level.
async fn nobody_locked_out(gw: &Recipe, user: &str, refusals: &[(u16, u64)]) {
    assert_eq!(refusals.len(), 5, "{refusals:?}");
    for &(status, retry_after) in refusals {
        assert_eq!(status, 429);
        assert!(
            (1..=TIMEOUT_SECS).contains(&retry_after),
            "Retry-After {retry_after}: at most the upstream's timeout"
        );
    }
    let usage = settled_usage(gw, user).await;
    assert_eq!(usage["blocked_ms"], 0, "{user} is locked out: {usage}");
    assert_eq!(
        usage["limits"][0]["block_level"].as_u64().unwrap_or(0),
        0,
        "{usage}"
    );
    let blocked = gw.admin_get_patiently("/admin/blocked?route=login").await;
    assert_eq!(blocked["blocked"], serde_json::json!([]), "{blocked}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_attempts_left_before_the_upstream_lock_nobody_out() {
    let redis = RedisServer::start_async().await;
    let upstream = full_listener();
    let gw = Recipe::start_at("login.toml", &redis, &format!("http://{}", upstream.addr)).await;

    // HTTP/2: ten streams in one write; the five refusals answer, the five admitted hang on
    // the upstream's handshake until their streams are reset
    let client = h2_client(&gw).await;
    let streams = ten_h2_attempts(client, "victim");
    let mut refusals = Vec::new();
    let mut pending = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    for (response, send) in streams {
        match tokio::time::timeout_at(deadline, response).await {
            Ok(Ok(r)) => refusals.push((r.status().as_u16(), retry_after(r.headers()))),
            _ => pending.push(send),
        }
    }
    assert_eq!(
        pending.len(),
        5,
        "five attempts admitted, hanging at the upstream"
    );
    for mut send in pending {
        send.send_reset(h2::Reason::CANCEL);
    }
    nobody_locked_out(&gw, "victim", &refusals).await;

    // HTTP/1.1: ten connections, closed once the five refusals have answered
    let mut sockets = Vec::new();
    for _ in 0..10 {
        let body = BODY.replace("%USER%", "owner");
        let request = format!(
            "POST /api/login HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut s = TcpStream::connect(gw.running().proxy_addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        sockets.push(s);
    }
    let mut refusals = Vec::new();
    let mut left = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    for mut s in sockets {
        let mut head = vec![0u8; 4096];
        match tokio::time::timeout_at(deadline, s.read(&mut head)).await {
            Ok(Ok(n)) if n > 0 => {
                let text = String::from_utf8_lossy(&head[..n]).to_string();
                let status = text[9..12].parse().unwrap();
                let retry = text
                    .lines()
                    .find_map(|l| l.strip_prefix("retry-after: "))
                    .map_or(0, |v| v.trim().parse().unwrap());
                refusals.push((status, retry));
            }
            _ => left += 1, // dropped here: the client leaves
        }
    }
    assert_eq!(left, 5, "five attempts admitted, hanging at the upstream");
    nobody_locked_out(&gw, "owner", &refusals).await;

    let m = gw.metrics().await;
    for limit in ["failed-logins", "per-ip"] {
        let labels = [("route", "login"), ("limit", limit)];
        let started = support::metrics::value(&m, "slidegate_blocks_started_total", &labels);
        assert_eq!(
            started.unwrap_or(0.0),
            0.0,
            "a block of {limit} was started"
        );
    }
    gw.stop().await;
}

/// Ten attempts for one account sent while the store is held (Redis paused) and reset before it
/// answers: every decision is concluded after its client left, the five admitted ones refunded
/// and the five refused ones (standing on those five) answered to no one. What the refusals
/// told nobody must not outlive the refunds: nothing is left in the instance's deny cache, so
/// the owner's next attempt is decided by the store. Three rounds, an account each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_reset_while_the_store_decides_leave_no_refusal_cached() {
    let redis = RedisServer::start_async().await;
    let upstream = full_listener();
    let gw = Recipe::start_at("login.toml", &redis, &format!("http://{}", upstream.addr)).await;
    for round in 0..3 {
        let user = format!("victim{round}");
        let client = h2_client(&gw).await;
        redis.pause();
        let mut streams = ten_h2_attempts(client, &user);
        // the gateway reads the ten and asks the store, which answers nothing yet
        tokio::time::sleep(Duration::from_millis(150)).await;
        for (_, send) in &mut streams {
            send.send_reset(h2::Reason::CANCEL);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        redis.resume();
        let usage = settled_usage(&gw, &user).await;
        assert_eq!(usage["blocked_ms"], 0, "{user} is locked out: {usage}");
        // every answer was concluded before the refunds were applied; a moment more for any
        // refusal concluded last
        tokio::time::sleep(Duration::from_millis(50)).await;
        let path = format!("/admin/usage?route=login&key={user}&limit=failed-logins");
        let cached = gw.admin_get_patiently(&path).await["deny_cached_ms"].clone();
        assert_eq!(
            cached, 0,
            "round {round}: {user}'s attempts are refused from the cache"
        );
    }
    let m = gw.metrics().await;
    let admitted = support::metrics::value(
        &m,
        "slidegate_outcome_refunds_total",
        &[("route", "login"), ("limit", "failed-logins")],
    );
    assert_eq!(admitted, Some(15.0), "five refunds a round:\n{m}");
    gw.stop().await;
}

/// An HTTP/2 connection to `gw`'s proxy listener, ready to send.
async fn h2_client(gw: &Recipe) -> h2::client::SendRequest<Bytes> {
    let stream = TcpStream::connect(gw.running().proxy_addr).await.unwrap();
    let (client, conn) = h2::client::handshake(stream).await.unwrap();
    tokio::spawn(conn);
    client.ready().await.unwrap()
}

/// Ten login attempts for `user` on `client`, each sent whole in its own stream: each
/// stream's response and its sending half (to reset it).
fn ten_h2_attempts(
    mut client: h2::client::SendRequest<Bytes>,
    user: &str,
) -> Vec<(h2::client::ResponseFuture, h2::SendStream<Bytes>)> {
    let body = BODY.replace("%USER%", user);
    let mut streams = Vec::new();
    for _ in 0..10 {
        let req = http::Request::post("http://gw/api/login")
            .header("content-type", "application/json")
            .body(())
            .unwrap();
        let (response, mut send) = client.send_request(req, false).unwrap();
        send.send_data(Bytes::from(body.clone()), true).unwrap();
        streams.push((response, send));
    }
    streams
}

fn retry_after(headers: &http::HeaderMap) -> u64 {
    headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

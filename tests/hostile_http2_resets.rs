//! HTTP/2 rapid reset (CVE-2023-44487, SPEC section 5): a client that resets streams faster than
//! it lets them finish gets GOAWAY and its connection closes, whether the streams were still
//! pending (hyper's own bound) or already accepted, their requests at the upstream (a reset then
//! drops the gateway's service future or response body); a client whose streams mostly finish
//! is never cut, however many it cancels.

mod support;

use std::time::Duration;

use bytes::Bytes;
use slidegate::server::RAPID_RESETS;
use support::gateway::{self, config};
use support::upstream::{self, Upstream};
use tokio::net::TcpStream;

const MEMORY: &str = "backend = \"memory\"";
const ALL: &str = "[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n";

type Client = h2::client::SendRequest<Bytes>;

/// An HTTP/2 connection (prior knowledge) and the task driving it.
async fn connect(
    gw: &gateway::Gateway,
) -> (Client, tokio::task::JoinHandle<Result<(), h2::Error>>) {
    let stream = TcpStream::connect(gw.running().proxy_addr).await.unwrap();
    let (client, conn) = h2::client::handshake(stream).await.unwrap();
    (client, tokio::spawn(conn))
}

/// A GET on a new stream (its end with the head); `None` once the connection refuses streams.
async fn open(
    client: &mut Client,
    path: &str,
) -> Option<(h2::client::ResponseFuture, h2::SendStream<Bytes>)> {
    *client = client.clone().ready().await.ok()?;
    let req = http::Request::get(format!("http://x{path}"))
        .body(())
        .unwrap();
    client.send_request(req, true).ok()
}

/// Waits (at most 5 s) until the upstream has received `n` requests; `false` if it never did.
async fn upstream_has(up: &Upstream, n: usize) -> bool {
    for _ in 0..1000 {
        if up.seen().len() >= n {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

/// A client that opens streams and resets them at once gets its connection closed instead of
/// keeping the gateway busy (resets of streams hyper had not accepted yet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_resets_of_pending_streams_close_the_connection() {
    let up = upstream::start().await;
    let gw = gateway::start(&config(MEMORY, &up.url(), ALL)).await;
    let (mut client, driven) = connect(&gw).await;
    let mut refused = false;
    for _ in 0..2000 {
        match open(&mut client, "/reset").await {
            Some((_, mut send)) => send.send_reset(h2::Reason::CANCEL),
            None => {
                refused = true;
                break;
            }
        }
    }
    let ended = tokio::time::timeout(Duration::from_secs(10), driven).await;
    assert!(refused || ended.is_ok(), "2000 rapid resets were served");
    let result = ended.expect("the connection ended").expect("its task");
    assert!(result.is_err(), "ended by a GOAWAY, not a clean close");
    gw.stop().await;
}

/// Resets of streams the gateway already accepted count too: ten streams at a time, each reset
/// once its request is at the upstream; within the hundredth-odd reset the gateway says GOAWAY
/// (no new stream is taken) and closes the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_resets_of_accepted_streams_close_the_connection() {
    let up = upstream::start().await;
    let gw = gateway::start(&config(MEMORY, &up.url(), ALL)).await;
    let (mut client, driven) = connect(&gw).await;
    let mut resets = 0;
    'flood: for _ in 0..30 {
        let before = up.seen().len();
        let mut streams = Vec::new();
        for _ in 0..10 {
            match open(&mut client, "/slow?ms=3000").await {
                Some(stream) => streams.push(stream),
                None => break 'flood,
            }
        }
        // accepted: every request of the round is at the upstream
        if !upstream_has(&up, before + streams.len()).await {
            break;
        }
        for (_, mut send) in streams {
            send.send_reset(h2::Reason::CANCEL);
            resets += 1;
        }
    }
    let ended = tokio::time::timeout(Duration::from_secs(10), driven).await;
    assert!(
        ended.is_ok(),
        "{resets} resets of accepted streams were served"
    );
    assert!(
        (RAPID_RESETS..RAPID_RESETS + 30).contains(&resets),
        "cut after {resets} resets"
    );
    assert!(
        open(&mut client, "/after").await.is_none(),
        "the connection still takes streams"
    );
    gw.stop().await;
}

/// A client that cancels many streams but lets most of them finish keeps its connection: 120
/// resets of accepted streams among 360 streams, then a request answered on the same
/// connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_lets_its_streams_finish_is_not_cut() {
    let up = upstream::start().await;
    let gw = gateway::start(&config(MEMORY, &up.url(), ALL)).await;
    let (mut client, driven) = connect(&gw).await;
    for _ in 0..30 {
        let before = up.seen().len();
        let mut cancelled = Vec::new();
        for _ in 0..4 {
            cancelled.push(open(&mut client, "/slow?ms=3000").await.expect("a stream"));
        }
        for _ in 0..8 {
            let (response, _) = open(&mut client, "/fast").await.expect("a stream");
            let mut body = response.await.expect("an answer").into_body();
            while let Some(chunk) = body.data().await {
                let chunk = chunk.unwrap();
                let _ = body.flow_control().release_capacity(chunk.len());
            }
        }
        assert!(upstream_has(&up, before + 12).await);
        for (_, mut send) in cancelled {
            send.send_reset(h2::Reason::CANCEL);
        }
    }
    let (response, _) = open(&mut client, "/still-here").await.expect("a stream");
    assert_eq!(response.await.expect("an answer").status(), 200);
    assert!(!driven.is_finished(), "the connection was cut");
    gw.stop().await;
}

/// One HTTP/2 frame: its 9-byte header and `payload`.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A GET of `path` on `stream`, its end with the head (HPACK: `:method GET`, `:scheme http`,
/// `:path` and `:authority` as literals of the static table's names, no Huffman).
fn get(stream: u32, path: &str) -> Vec<u8> {
    let mut block = vec![0x82, 0x86, 0x04, path.len() as u8];
    block.extend_from_slice(path.as_bytes());
    block.extend_from_slice(&[0x01, 1, b'x']);
    frame(0x1, 0x4 | 0x1, stream, &block)
}

/// A client that ignores GOAWAY: once its resets have crossed the line, the streams it opens
/// after the gateway's GOAWAY are not read, so none is decided or reaches the upstream (hyper's
/// GOAWAY names the highest stream id until its PING comes back, which such a client never
/// answers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_opened_after_the_rapid_reset_goaway_are_not_served() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = upstream::start().await;
    let gw = gateway::start(&config(MEMORY, &up.url(), ALL)).await;
    let stream = TcpStream::connect(gw.running().proxy_addr).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(frame(0x4, 0, 0, &[]));
    write.write_all(&hello).await.unwrap();
    // Reads frames until a GOAWAY (type 7) or the end; what it saw.
    let goaway = tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut buf = [0u8; 65536];
        loop {
            match tokio::time::timeout(Duration::from_secs(10), read.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => seen.extend_from_slice(&buf[..n]),
                _ => return false,
            }
            let mut at = 0;
            while seen.len() >= at + 9 {
                if seen[at + 3] == 0x7 {
                    return true;
                }
                let len = (seen[at] as usize) << 16
                    | (seen[at + 1] as usize) << 8
                    | seen[at + 2] as usize;
                at += 9 + len;
            }
        }
    });
    let mut id = 1;
    for _ in 0..RAPID_RESETS * 4 {
        if goaway.is_finished() {
            break;
        }
        let mut pair = get(id, "/reset");
        pair.extend(frame(0x3, 0, id, &8u32.to_be_bytes()));
        if write.write_all(&pair).await.is_err() {
            break;
        }
        id += 2;
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    assert!(
        goaway.await.unwrap(),
        "no GOAWAY after {} streams reset",
        id / 2
    );
    for _ in 0..50 {
        let _ = write.write_all(&get(id, "/after")).await;
        id += 2;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = up.seen().iter().filter(|p| p.starts_with("/after")).count();
    assert_eq!(after, 0, "streams opened after GOAWAY reached the upstream");
    gw.stop().await;
}

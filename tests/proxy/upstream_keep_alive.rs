//! The gateway's keep-alive connections to an upstream: one connection carries request after
//! request while the upstream keeps it open; an answer with `Connection: close` is the
//! connection's last; and an idle connection the upstream closed without saying so is never
//! used for a request (the request goes, once, on a new connection). The upstream here is a
//! raw socket server that counts the connections it accepted and the request heads it read.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::gateway::{self, config};
use support::hardening::{ALL, MEMORY};
use support::http::HttpClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the upstream ends a connection.
#[derive(Clone, Copy, PartialEq)]
enum Ending {
    /// It keeps every connection open.
    Never,
    /// It answers with `Connection: close`, then closes.
    SaysClose,
    /// It answers as keep-alive, then closes without a word.
    Quietly,
}

/// What the upstream saw: connections accepted, request heads read, connections it closed.
#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    requests: AtomicUsize,
    closed: AtomicUsize,
}

/// A raw HTTP/1.1 upstream on a free port that answers every request `200 ok` and ends its
/// connections as `ending` says; its URL and what it saw.
async fn upstream(ending: Ending) -> (String, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Seen::default());
    let counted = seen.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            counted.connections.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve(stream, ending, counted.clone()));
        }
    });
    (url, seen)
}

/// Answers the requests of one connection until the client closes it or `ending` ends it.
async fn serve(mut stream: TcpStream, ending: Ending, seen: Arc<Seen>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        head.clear(); // a GET through the gateway has no body
        seen.requests.fetch_add(1, Ordering::SeqCst);
        let close = if ending == Ending::SaysClose {
            "connection: close\r\n"
        } else {
            ""
        };
        let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n{close}\r\nok");
        if stream.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
        if ending != Ending::Never {
            if ending == Ending::Quietly {
                // later than the answer: the gateway has put the connection back among its
                // idle ones by then
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            drop(stream);
            seen.closed.fetch_add(1, Ordering::SeqCst);
            return;
        }
    }
}

/// Three requests one after another through a gateway in front of an upstream that ends its
/// connections as `ending` says, each sent once the upstream has closed what it meant to
/// close; their statuses and what the upstream saw.
async fn three_requests(ending: Ending) -> (Vec<u16>, Arc<Seen>) {
    let (url, seen) = upstream(ending).await;
    let gw = gateway::start(&config(MEMORY, &url, ALL)).await;
    let client = HttpClient::default();
    let mut statuses = Vec::new();
    for n in 0..3 {
        if ending != Ending::Never {
            // (a request that never reached the upstream leaves its connection open: the
            // statuses tell)
            for _ in 0..200 {
                if seen.closed.load(Ordering::SeqCst) >= n {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            // time for the close to reach the gateway's side while its connection is idle
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let reply = client.get(&gw.url(&format!("/r{n}")), &[]).await;
        statuses.push(reply.status.as_u16());
    }
    gw.stop().await;
    (statuses, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_carries_every_request_while_the_upstream_keeps_it_open() {
    let (statuses, seen) = three_requests(Ending::Never).await;
    assert_eq!(statuses, [200, 200, 200]);
    assert_eq!(seen.requests.load(Ordering::SeqCst), 3);
    assert_eq!(seen.connections.load(Ordering::SeqCst), 1, "reused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_says_close_is_its_connections_last() {
    let (statuses, seen) = three_requests(Ending::SaysClose).await;
    assert_eq!(statuses, [200, 200, 200]);
    assert_eq!(seen.requests.load(Ordering::SeqCst), 3);
    assert_eq!(seen.connections.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_the_upstream_closed_quietly_is_not_used() {
    let (statuses, seen) = three_requests(Ending::Quietly).await;
    assert_eq!(
        statuses,
        [200, 200, 200],
        "no 502 for a closed idle connection"
    );
    assert_eq!(
        seen.requests.load(Ordering::SeqCst),
        3,
        "each request reached the upstream once"
    );
    assert_eq!(seen.connections.load(Ordering::SeqCst), 3);
}

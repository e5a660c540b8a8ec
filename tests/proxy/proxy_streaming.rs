//! Bodies stream through the proxy both ways, nothing buffered: a response's first chunk arrives
//! long before its last one is sent, and a request body reaches the upstream while the client is
//! still sending it.

use crate::support;

use std::time::{Duration, Instant};

use http::Method;
use support::gateway::{self, config};
use support::http::HttpClient;
use support::upstream;

const MEMORY: &str = "backend = \"memory\"";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_stream_both_ways() {
    let up = upstream::start().await;
    let routes = "[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n";
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let client = HttpClient::default();
    let big = "x".repeat(3 * 1024 * 1024);
    let echoed = client.send(Method::POST, &gw.url("/echo"), &[], &big).await;
    assert_eq!(echoed.body.len(), big.len());

    // The first chunk must arrive long before the last one is sent: nothing is buffered.
    let stream = tokio::net::TcpStream::connect(gw.running().proxy_addr)
        .await
        .unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<
        _,
        http_body_util::Empty<bytes::Bytes>,
    >(hyper_util::rt::TokioIo::new(stream))
    .await
    .unwrap();
    tokio::spawn(conn);
    let started = Instant::now();
    let req = http::Request::get("/drip?chunks=3&ms=400")
        .header("host", "x")
        .body(http_body_util::Empty::new())
        .unwrap();
    let mut resp = sender.send_request(req).await.unwrap();
    use http_body_util::BodyExt;
    let first = resp.body_mut().frame().await.unwrap().unwrap();
    assert!(first.is_data());
    assert!(
        started.elapsed() < Duration::from_millis(600),
        "first chunk after {:?}",
        started.elapsed()
    );
    while resp.body_mut().frame().await.is_some() {}
    assert!(started.elapsed() >= Duration::from_millis(800));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_reach_the_upstream_while_the_client_is_still_sending() {
    use http_body_util::{BodyExt, StreamBody};
    let up = upstream::start().await;
    let routes = "[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n";
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let stream = tokio::net::TcpStream::connect(gw.running().proxy_addr)
        .await
        .unwrap();
    let (chunks, body) =
        tokio::sync::mpsc::channel::<Result<hyper::body::Frame<bytes::Bytes>, std::io::Error>>(1);
    let body = StreamBody::new(tokio_stream_of(body));
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = http::Request::post("/echo")
        .header("host", "x")
        .header("transfer-encoding", "chunked")
        .body(body)
        .unwrap();
    let response = tokio::spawn(async move { sender.send_request(req).await });
    chunks
        .send(Ok(hyper::body::Frame::data(bytes::Bytes::from_static(
            b"first;",
        ))))
        .await
        .unwrap();
    // The upstream echoes what it receives: the first chunk comes back through the gateway
    // while the request body is still open. A gateway that buffered the request would hold it
    // until the body ended, and nothing would come back.
    let mut resp = tokio::time::timeout(Duration::from_secs(5), response)
        .await
        .expect("the response head comes while the request is still being sent")
        .unwrap()
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), resp.body_mut().frame())
        .await
        .expect("the first chunk is echoed before the second is sent")
        .unwrap()
        .unwrap();
    assert_eq!(
        first.into_data().unwrap(),
        bytes::Bytes::from_static(b"first;")
    );
    chunks
        .send(Ok(hyper::body::Frame::data(bytes::Bytes::from_static(
            b"second",
        ))))
        .await
        .unwrap();
    drop(chunks);
    let rest = tokio::time::timeout(Duration::from_secs(5), resp.into_body().collect())
        .await
        .unwrap()
        .unwrap()
        .to_bytes();
    assert_eq!(rest, bytes::Bytes::from_static(b"second"));
}

/// A channel's receiving end as a stream of body frames.
fn tokio_stream_of<T>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// A client that sends a request's head and part of its body, then nothing, to an upstream that
/// answers late (as one that reads the whole body first): once the body has not moved for the
/// upstream's `timeout` (2 s here), the gateway answers 408 `body_timeout`
/// and closes the connection, as NGINX's `client_body_timeout` does, instead of holding the
/// connection (and an upstream connection) for as long as the client likes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_that_stops_coming_is_cut() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = upstream::start().await;
    let routes = "[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n";
    let gw = gateway::start(&config(MEMORY, &up.url(), routes)).await;
    let mut stream = tokio::net::TcpStream::connect(gw.running().proxy_addr)
        .await
        .unwrap();
    stream
        .write_all(
            b"POST /slow?ms=8000 HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789",
        )
        .await
        .unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the gateway cuts the stalled body and closes")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body_timeout"), "{answer}");
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
}

/// An upstream that accepts a request and never reads its body: once the body has not moved
/// for the upstream's `timeout`, the client gets 504, as NGINX's `proxy_send_timeout` gives,
/// instead of an upload that hangs with no answer and no access log line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_stops_reading_a_body_is_a_504() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(stream);
    });
    let routes = "[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n";
    let gw = gateway::start(&config(MEMORY, &format!("http://{addr}"), routes)).await;
    let stream = tokio::net::TcpStream::connect(gw.running().proxy_addr)
        .await
        .unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let size = 64 << 20;
    let writing = tokio::spawn(async move {
        let head = format!("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n");
        writer.write_all(head.as_bytes()).await?;
        let chunk = vec![b'x'; 1 << 16];
        for _ in 0..(size >> 16) {
            writer.write_all(&chunk).await?;
        }
        Ok::<_, std::io::Error>(writer)
    });
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(15), reader.read(&mut answer))
        .await
        .expect("an answer while the upload is stuck")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 504"), "{answer}");
    writing.abort();
    held.abort();
}

/// A client that asks for a large answer and stops reading it: once it has taken nothing the
/// gateway writes for `idle_timeout` (1 s here), the connection is closed, as NGINX's
/// `send_timeout` closes one, instead of holding it and the upstream's for as long as the client
/// likes. The bytes already in the socket's buffers still arrive, then the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_an_answer_is_cut() {
    use support::gateway::with_server;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // An upstream whose answer never ends: a gigabyte announced, written as fast as it goes.
    let endless = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut head = [0u8; 4096];
        let _ = stream.read(&mut head).await;
        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n";
        stream.write_all(answer).await.unwrap();
        let chunk = vec![b'x'; 1 << 16];
        while stream.write_all(&chunk).await.is_ok() {}
    });
    let routes = "[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n";
    let toml = with_server(
        &config(MEMORY, &format!("http://{addr}"), routes),
        "idle_timeout = \"1s\"",
    );
    let gw = gateway::start(&toml).await;
    let mut stream = tokio::net::TcpStream::connect(gw.running().proxy_addr)
        .await
        .unwrap();
    stream
        .write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // reads nothing while the gateway's writes fill the socket's buffers
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (mut got, mut buf) = (0usize, vec![0u8; 1 << 16]);
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(n) => got += n,
            }
            if got > 256 << 20 {
                return false;
            }
        }
    })
    .await;
    assert_eq!(ended, Ok(true), "the answer kept coming: {got} bytes");
    endless.abort();
}

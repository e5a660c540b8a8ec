//! An upstream answer framed two ways (`Content-Length` beside `Transfer-Encoding: chunked`) is
//! framed by its chunks, as RFC 9112 6.3 says: the client gets the whole decoded body, not as
//! many bytes as the stale `Content-Length` said.

use crate::support;

use std::time::Duration;

use support::gateway::{self, config};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn an_answer_framed_two_ways_is_sent_on_whole() {
    let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    let up = support::upstream::answering_once(answer.to_vec()).await;
    let routes = "[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n";
    let gw = gateway::start(&config(
        "backend = \"memory\"",
        &format!("http://{up}"),
        routes,
    ))
    .await;
    let mut stream = TcpStream::connect(gw.running().proxy_addr).await.unwrap();
    stream
        .write_all(b"GET /x HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("the answer within 10 s")
        .unwrap();
    let text = String::from_utf8_lossy(&raw).to_ascii_lowercase();
    assert!(!text.contains("content-length: 3"), "{text}");
    assert!(text.contains("hello"), "the whole body: {text}");
}

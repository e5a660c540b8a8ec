//! An upstream answer framed two ways (`Content-Length` beside `Transfer-Encoding: chunked`) is
//! framed by its chunks, as RFC 9112 6.3 says: the client gets the whole decoded body, not as
//! many bytes as the stale `Content-Length` said.

use crate::support;

use support::gateway::{self, config};

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
    let reply = support::raw::request(gw.running().proxy_addr, "GET", "/x", &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.head);
    assert_ne!(reply.header("content-length"), Some("3"), "{}", reply.head);
    assert_eq!(reply.body, "hello", "the whole body");
}

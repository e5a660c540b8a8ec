//! Small chunks an upstream sent together reach the client as one chunk (README, "The traffic
//! path"): an upstream writes an answer of 20 small chunks in one write; the client, reading the
//! gateway's answer off a raw socket, gets the same bytes in one or two chunks, not 20. Chunks
//! sent apart still arrive apart, the first before the second is sent (`proxy_streaming`).

use crate::support;

use std::time::Duration;

use support::gateway::{self, config};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MEMORY: &str = "backend = \"memory\"";
const CHUNKS: usize = 20;

/// The event of chunk `i`.
fn event(i: usize) -> String {
    format!("data: {{\"n\":{i}}}\n\n")
}

/// An answer of `CHUNKS` small chunks, which the upstream writes all at once.
fn burst_answer() -> Vec<u8> {
    let mut answer =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec();
    for i in 0..CHUNKS {
        let e = event(i);
        answer.extend_from_slice(format!("{:x}\r\n{e}\r\n", e.len()).as_bytes());
    }
    answer.extend_from_slice(b"0\r\n\r\n");
    answer
}

/// The data of each chunk of a chunked body that `raw` (a whole answer) carries.
fn chunks_of(raw: &[u8]) -> Vec<Vec<u8>> {
    let at = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let mut rest = &raw[at..];
    let mut chunks = Vec::new();
    loop {
        let line = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..line]).unwrap(), 16).unwrap();
        if size == 0 {
            return chunks;
        }
        chunks.push(rest[line + 2..line + 2 + size].to_vec());
        rest = &rest[line + 2 + size + 2..];
    }
}

#[tokio::test]
async fn small_chunks_sent_together_arrive_as_one() {
    let up = support::upstream::answering_once(burst_answer()).await;
    let routes = "[[routes]]\nname = \"all\"\npath = \"/*\"\nupstream = \"up\"\n";
    let gw = gateway::start(&config(MEMORY, &format!("http://{up}"), routes)).await;
    let mut stream = TcpStream::connect(gw.running().proxy_addr).await.unwrap();
    stream
        .write_all(b"GET /events HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("the answer within 10 s")
        .unwrap();
    assert!(
        raw.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&raw)
    );

    let chunks = chunks_of(&raw);
    let sent: String = (0..CHUNKS).map(event).collect();
    assert_eq!(chunks.concat(), sent.as_bytes(), "the bytes, unchanged");
    assert!(
        chunks.len() <= 2,
        "{CHUNKS} chunks sent in one write reached the client as {} chunks",
        chunks.len()
    );
}

//! Raw HTTP/1.1 over a plain TCP socket, for requests a well-behaved client library would not
//! send (odd paths, oversized heads, conflicting framing headers, slow heads).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A response read off the socket.
#[derive(Debug)]
pub struct RawReply {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl RawReply {
    /// A header value (first occurrence, case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.body))
    }
}

/// Sends `request` as it is (with `Connection: close` expected in it) and reads the whole
/// answer until the server closes; fails the test after 10 s.
pub async fn send(addr: SocketAddr, request: &[u8]) -> RawReply {
    let fut = async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream.write_all(request).await.expect("write request");
        let mut buf = Vec::new();
        let _ = stream.read_to_end(&mut buf).await;
        parse(&buf)
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .expect("raw response within 10 s")
}

/// Reads one response head (up to its blank line) off `stream`, no further; fails the test
/// after 10 s. For the interim `100 Continue` a client waits for before it sends its body.
pub async fn read_head(stream: &mut TcpStream) -> String {
    let fut = async {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            let n = stream.read(&mut byte).await.expect("read a response head");
            assert!(n > 0, "closed before a whole head: {head:?}");
            head.push(byte[0]);
        }
        String::from_utf8_lossy(&head).into_owned()
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .expect("a response head within 10 s")
}

/// `METHOD TARGET HTTP/1.1` with a Host header, extra header lines and no body.
pub async fn request(addr: SocketAddr, method: &str, target: &str, headers: &[&str]) -> RawReply {
    let mut text = format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for h in headers {
        text.push_str(h);
        text.push_str("\r\n");
    }
    text.push_str("Content-Length: 0\r\n\r\n");
    send(addr, text.as_bytes()).await
}

/// Splits the first response into status, head and body (de-chunking a chunked body, cutting
/// at `Content-Length`).
pub fn parse(buf: &[u8]) -> RawReply {
    let text = String::from_utf8_lossy(buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text.as_str(), ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let length = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())?
    });
    // The first answer only: a pipelined second one after it is not its body.
    let body = match (chunked, length) {
        (true, _) => dechunk(body),
        (false, Some(n)) => body.get(..n).unwrap_or(body).to_string(),
        (false, None) => body.to_string(),
    };
    RawReply {
        status,
        head: head.to_string(),
        body,
    }
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

//! Clients that leave before their answer, against the real binary (its JSON access log read
//! back): an HTTP/1.1 client that closes its socket, an HTTP/2 client (prior knowledge) that
//! resets its stream after sending its DATA. Each leaves once a condition holds (typically: the
//! upstream has the request), so the moment it leaves is known, not raced. The gateway trusts
//! 127.0.0.1, so a test names each request by its `X-Request-Id` and finds its access line.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::gateway::TOKEN;
use super::http::HttpClient;
use super::process::Process;

/// A gateway process with its JSON access log.
pub struct LeavingGateway {
    pub process: Process,
    pub proxy: SocketAddr,
    pub admin: SocketAddr,
    /// Log lines read so far.
    read: Mutex<Vec<String>>,
    _dir: tempfile::TempDir,
}

impl LeavingGateway {
    /// Starts the binary with `store` (a `[store]` body), one upstream `up` at `upstream` with
    /// the settings `upstream_settings` (TOML lines), and `routes`.
    pub fn start(store: &str, upstream: &str, upstream_settings: &str, routes: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let scripts = super::gateway::scripts_line(store);
        let toml = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ntrusted_proxies = [\"127.0.0.1/32\"]\n\
             [admin]\nlisten = \"127.0.0.1:0\"\n[store]\n{store}{scripts}\n\
             [upstreams.up]\nurl = \"{upstream}\"\n{upstream_settings}\n{routes}"
        );
        std::fs::write(&path, toml).unwrap();
        let envs = [
            ("SLIDEGATE_LOG_FORMAT", "json"),
            ("SLIDEGATE_ADMIN_TOKEN", TOKEN),
        ];
        let process = Process::start(&path, &envs);
        let (proxy, admin) = process.listening();
        LeavingGateway {
            process,
            proxy,
            admin,
            read: Mutex::new(Vec::new()),
            _dir: dir,
        }
    }

    /// `/admin/usage` of `key` on `route`.
    pub async fn usage(&self, route: &str, key: &str) -> Value {
        let url = format!("http://{}/admin/usage?route={route}&key={key}", self.admin);
        let auth = format!("Bearer {TOKEN}");
        HttpClient::default()
            .get(&url, &[("authorization", &auth)])
            .await
            .json()
    }

    /// Units `key` has used of the first limit of `route`.
    pub async fn used(&self, route: &str, key: &str) -> u64 {
        self.usage(route, key).await["limits"][0]["used"]
            .as_u64()
            .unwrap()
    }

    /// `/metrics`.
    pub async fn metrics(&self) -> String {
        let url = format!("http://{}/metrics", self.admin);
        HttpClient::default().get(&url, &[]).await.body
    }

    /// The access line of request `id` (its `fields`), waiting up to 10 s for it.
    pub fn access(&self, id: &str) -> Value {
        let mut read = self.read.lock().unwrap();
        if !read.iter().any(|l| l.contains(id)) {
            let lines = tokio::task::block_in_place(|| self.process.lines_until(id));
            read.extend(lines);
        }
        let line = read
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["target"] == "slidegate::access" && v["fields"]["request_id"] == id);
        line.unwrap_or_else(|| panic!("no access line for {id}"))["fields"].clone()
    }

    /// An HTTP/2 connection to the proxy listener (prior knowledge), driven in a task.
    pub async fn h2(&self) -> h2::client::SendRequest<Bytes> {
        let stream = TcpStream::connect(self.proxy).await.unwrap();
        let (client, conn) = h2::client::handshake(stream).await.unwrap();
        tokio::spawn(conn);
        client
    }
}

/// Waits (polling every 5 ms, at most 10 s) until `done` holds.
pub async fn until(mut done: impl FnMut() -> bool) {
    for _ in 0..2000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the condition did not hold within 10 s");
}

/// Waits (at most 10 s) until `check` gives `Some`.
pub async fn eventually<T, F: Future<Output = Option<T>>>(mut check: impl FnMut() -> F) -> T {
    for _ in 0..500 {
        if let Some(v) = check().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no answer within 10 s");
}

/// POSTs `body` (JSON) to `target` over HTTP/1.1 as request `id`, then closes the socket
/// once `leave_when` holds.
pub async fn post_and_close(
    proxy: SocketAddr,
    target: &str,
    id: &str,
    body: &str,
    leave_when: impl FnMut() -> bool,
) {
    let request = format!(
        "POST {target} HTTP/1.1\r\nHost: gw\r\nX-Request-Id: {id}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    until(leave_when).await;
    drop(stream);
}

/// POSTs `body` (JSON) to `target` on an HTTP/2 connection as request `id` (HEADERS, then
/// DATA ending the stream), then resets the stream (RST_STREAM, CANCEL) once `leave_when`
/// holds or the answer came first; the answer's status when it did.
pub async fn post_and_reset(
    client: &mut h2::client::SendRequest<Bytes>,
    target: &str,
    id: &str,
    body: &str,
    mut leave_when: impl FnMut() -> bool,
) -> Option<u16> {
    let ready = client.clone().ready().await.unwrap();
    *client = ready;
    let req = http::Request::builder()
        .method(Method::POST)
        .uri(format!("http://gw{target}"))
        .header("x-request-id", id)
        .header("content-type", "application/json")
        .body(())
        .unwrap();
    let (response, mut stream) = client.send_request(req, false).unwrap();
    stream
        .send_data(Bytes::from(body.to_string()), true)
        .unwrap();
    let mut response = std::pin::pin!(response);
    for _ in 0..2000 {
        if leave_when() {
            stream.send_reset(h2::Reason::CANCEL);
            return None;
        }
        let poll = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(response.as_mut().poll(cx).map(|r| r.map(|r| r.status())))
        });
        if let std::task::Poll::Ready(answer) = poll.await {
            stream.send_reset(h2::Reason::CANCEL);
            return Some(answer.unwrap().as_u16());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("request {id}: neither left nor answered within 10 s");
}

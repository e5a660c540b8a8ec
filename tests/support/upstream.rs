//! A real HTTP upstream on a free loopback port. It answers with a JSON description of the
//! request (method, path, query, headers), and has a few special paths:
//! `/slow?ms=N` waits N ms before the response head, `/echo` streams the request body back,
//! `/drip?chunks=N&ms=M` sends N chunks M ms apart.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;

/// A running upstream.
pub struct Upstream {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The request targets (path and query) it received, in arrival order.
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits (at most 5 s, then fails) until it has received a target starting with `prefix`:
    /// a request in flight is upstream, not after a guess.
    pub async fn wait_seen(&self, prefix: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !self.seen().iter().any(|p| p.starts_with(prefix)) {
            let now = std::time::Instant::now();
            assert!(
                now < deadline,
                "no request for {prefix} reached the upstream"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn query_param(req: &Request<Incoming>, name: &str) -> Option<u64> {
    req.uri().query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == name).then(|| v.parse().ok()).flatten()
    })
}

type Body = BoxBody<Bytes, hyper::Error>;

async fn answer(req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_string();
    if path == "/slow" {
        tokio::time::sleep(Duration::from_millis(
            query_param(&req, "ms").unwrap_or(1000),
        ))
        .await;
    }
    if path.ends_with("/forbidden") {
        let mut forbidden = Response::new(
            Full::new(Bytes::from_static(b"the app's own 403"))
                .map_err(|never| match never {})
                .boxed(),
        );
        *forbidden.status_mut() = http::StatusCode::FORBIDDEN;
        return Ok(forbidden);
    }
    if path == "/echo" {
        return Ok(Response::new(req.into_body().boxed()));
    }
    if path == "/drip" {
        let chunks = query_param(&req, "chunks").unwrap_or(3);
        let ms = query_param(&req, "ms").unwrap_or(100);
        let stream = futures_util::stream::iter(0..chunks).then(move |i| async move {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            Ok::<_, hyper::Error>(Frame::data(Bytes::from(format!("chunk{i}\n"))))
        });
        return Ok(Response::new(BodyExt::boxed(StreamBody::new(stream))));
    }
    let headers: serde_json::Map<String, serde_json::Value> = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                serde_json::Value::String(v.to_str().unwrap_or("").to_string()),
            )
        })
        .collect();
    let body = serde_json::json!({
        "method": req.method().as_str(),
        "path": path,
        "query": req.uri().query(),
        "headers": headers,
    });
    let mut response = Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed(),
    );
    response
        .headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    response
        .headers_mut()
        .insert("keep-alive", "timeout=5".parse().unwrap());
    Ok(response)
}

/// Starts an upstream on a free port (within the current tokio runtime).
pub async fn start() -> Upstream {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    serve(listener, Duration::ZERO)
}

/// Serves on a listener the caller bound (a chosen port, a small backlog), accepting nothing
/// during the first `busy_for` (a busy upstream whose listen backlog fills up meanwhile).
pub fn serve(listener: tokio::net::TcpListener, busy_for: Duration) -> Upstream {
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorder = seen.clone();
    let task = tokio::spawn(async move {
        tokio::time::sleep(busy_for).await;
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let recorder = recorder.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
                    recorder.lock().unwrap().push(target.to_string());
                    answer(req)
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Upstream { addr, seen, task }
}

/// An upstream that reads one request's head and answers it with `answer`, bytes as given (an
/// answer no well-behaved server would write, or one framed just so), then waits for the
/// gateway to close.
pub async fn answering_once(answer: Vec<u8>) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let Ok((mut stream, _)) = listener.accept().await else {
            return;
        };
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let _ = stream.write_all(&answer).await;
        let _ = stream.read(&mut buf).await;
    });
    addr
}

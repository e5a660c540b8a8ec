//! A real upstream that answers like an OpenAI-compatible chat completions API, on a free
//! loopback port: `POST /v1/chat/completions` with `"stream": true` streams server-sent events
//! (one per reply token, then, with `stream_options.include_usage`, a last chunk carrying
//! `usage`, then `data: [DONE]`), otherwise one JSON answer with `usage`. The request body's
//! `reply_tokens` (default 3) sets the reply's length (`total_tokens` = 5 prompt tokens +
//! reply tokens), and a request with `x-hold: 1` sends its first event (or nothing, for a whole
//! answer) and then waits for [`LlmUpstream::release`] before the rest. It also serves
//! `/header?tokens=N` (the cost in an `x-usage-tokens` header; with `x-hold: 1`, its head waits
//! for a release) and `/split?at=N&ms=M` (the
//! bytes given to [`LlmUpstream::set_payload`] as an event stream, in two chunks cut at N, M ms
//! apart). It records every request head it got and every body it sent, byte for byte.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{HeaderMap, Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::sync::{mpsc, Semaphore};

/// Prompt tokens of every answer.
pub const PROMPT_TOKENS: u64 = 5;

type Body = BoxBody<Bytes, Infallible>;

#[derive(Default)]
struct Shared {
    heads: Mutex<Vec<HeaderMap>>,
    sent: Mutex<Vec<Vec<u8>>>,
    payload: Mutex<Vec<u8>>,
}

/// A running upstream.
pub struct LlmUpstream {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    gate: Arc<Semaphore>,
    task: tokio::task::JoinHandle<()>,
}

impl LlmUpstream {
    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Lets `n` held answers go on.
    pub fn release(&self, n: usize) {
        self.gate.add_permits(n);
    }

    /// The heads of the requests it got, in arrival order.
    pub fn heads(&self) -> Vec<HeaderMap> {
        self.shared.heads.lock().unwrap().clone()
    }

    /// The bodies it sent, whole once each answer ended, in the order they ended.
    pub fn sent(&self) -> Vec<Vec<u8>> {
        self.shared.sent.lock().unwrap().clone()
    }

    /// The bytes `/split` sends.
    pub fn set_payload(&self, bytes: &[u8]) {
        *self.shared.payload.lock().unwrap() = bytes.to_vec();
    }
}

impl Drop for LlmUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The events of a streamed answer of `reply` tokens (`usage` in a last chunk when asked).
pub fn events(reply: u64, usage: bool) -> Vec<Vec<u8>> {
    let mut out = vec![b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}],\"usage\":null}\n\n".to_vec()];
    for i in 0..reply {
        out.push(format!("data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"tok{i} \"}}}}],\"usage\":null}}\n\n").into_bytes());
    }
    out.push(b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n".to_vec());
    if usage {
        out.push(format!("data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{{\"prompt_tokens\":{PROMPT_TOKENS},\"completion_tokens\":{reply},\"total_tokens\":{}}}}}\n\n", PROMPT_TOKENS + reply).into_bytes());
    }
    out.push(b"data: [DONE]\n\n".to_vec());
    out
}

/// A whole answer of `reply` tokens.
pub fn whole(reply: u64) -> Vec<u8> {
    format!("{{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"choices\":[{{\"index\":0,\"message\":{{\"role\":\"assistant\",\"content\":\"hi\"}},\"finish_reason\":\"stop\"}}],\"usage\":{{\"prompt_tokens\":{PROMPT_TOKENS},\"completion_tokens\":{reply},\"total_tokens\":{}}}}}", PROMPT_TOKENS + reply).into_bytes()
}

fn query(req: &Request<Incoming>, name: &str) -> Option<u64> {
    req.uri().query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == name).then(|| v.parse().ok()).flatten()
    })
}

/// A body sent as `chunks`, each after its wait (a chunk waits for the gate when its wait is
/// `None`), recorded whole once the last has gone.
fn streamed(
    chunks: Vec<(Option<Duration>, Vec<u8>)>,
    gate: Arc<Semaphore>,
    shared: Arc<Shared>,
) -> Body {
    let (tx, rx) = mpsc::channel::<Bytes>(1);
    tokio::spawn(async move {
        let mut all = Vec::new();
        for (wait, chunk) in chunks {
            match wait {
                Some(d) if !d.is_zero() => tokio::time::sleep(d).await,
                Some(_) => {}
                None => gate.acquire().await.expect("the gate stays open").forget(),
            }
            all.extend_from_slice(&chunk);
            if tx.send(Bytes::from(chunk)).await.is_err() {
                return;
            }
        }
        shared.sent.lock().unwrap().push(all);
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        let chunk = rx.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(chunk)), rx))
    });
    StreamBody::new(stream).boxed()
}

async fn answer(
    req: Request<Incoming>,
    gate: Arc<Semaphore>,
    shared: Arc<Shared>,
) -> Result<Response<Body>, Infallible> {
    shared.heads.lock().unwrap().push(req.headers().clone());
    let path = req.uri().path().to_string();
    let hold = req.headers().get("x-hold").is_some();
    if path == "/header" {
        let tokens = query(&req, "tokens").unwrap_or(0);
        if hold {
            // its head waits for a release
            gate.acquire().await.expect("the gate stays open").forget();
        }
        return Ok(Response::builder()
            .header("x-usage-tokens", tokens.to_string())
            .body(Full::new(Bytes::from_static(b"ok")).boxed())
            .unwrap());
    }
    if path == "/split" {
        let at = query(&req, "at").unwrap_or(0) as usize;
        let ms = query(&req, "ms").unwrap_or(0);
        let payload = shared.payload.lock().unwrap().clone();
        let (a, b) = payload.split_at(at.min(payload.len()));
        let chunks = vec![
            (Some(Duration::ZERO), a.to_vec()),
            (Some(Duration::from_millis(ms)), b.to_vec()),
        ];
        return Ok(Response::builder()
            .header("content-type", "text/event-stream")
            .body(streamed(chunks, gate, shared))
            .unwrap());
    }
    let body = req.into_body().collect().await.map(|b| b.to_bytes());
    let request: serde_json::Value = body
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let reply = request["reply_tokens"].as_u64().unwrap_or(3);
    if request["stream"].as_bool() == Some(true) {
        let usage = request["stream_options"]["include_usage"].as_bool() == Some(true);
        let chunks = events(reply, usage)
            .into_iter()
            .enumerate()
            .map(|(i, e)| match (i, hold) {
                (1, true) => (None, e),
                _ => (Some(Duration::ZERO), e),
            })
            .collect();
        return Ok(Response::builder()
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache")
            .body(streamed(chunks, gate, shared))
            .unwrap());
    }
    let wait = if hold { None } else { Some(Duration::ZERO) };
    Ok(Response::builder()
        .header("content-type", "application/json")
        .body(streamed(vec![(wait, whole(reply))], gate, shared))
        .unwrap())
}

/// Starts the upstream on a free port (within the current tokio runtime).
pub async fn start() -> LlmUpstream {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shared = Arc::new(Shared::default());
    let gate = Arc::new(Semaphore::new(0));
    let (s, g) = (shared.clone(), gate.clone());
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            // each chunk on the wire as it is written (a cut stays a cut)
            let _ = stream.set_nodelay(true);
            let (s, g) = (s.clone(), g.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    answer(req, g.clone(), s.clone())
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    LlmUpstream {
        addr,
        shared,
        gate,
        task,
    }
}

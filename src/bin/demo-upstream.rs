//! A tiny demo upstream for the quick start, the recipes and the benchmark: answers every
//! request with a short JSON body describing it. `demo-upstream [ADDR]` (default
//! 127.0.0.1:9000).
//!
//! `/api/login` (the login recipe's path, `examples/login.toml`) and `/login` stand for a login
//! endpoint whose outcome the caller picks, so the recipe's failures can be shown: `401
//! Unauthorized` when the JSON body's `password` is anything but `"right"` (the demo's one
//! good password), or when the query holds `fail=1` (the benchmark's `login-outcome` target
//! sends half its attempts that way); 200 otherwise, a body without a `password` included.
//! The answer waits `ms=N` milliseconds when the query asks (the `login-leave` target's clients
//! leave meanwhile).
//!
//! `/sse` streams an answer as an OpenAI-compatible chat completions API does with
//! `stream_options.include_usage`: `events=N` server-sent events (20 by default), one frame
//! each, the last but one carrying `usage.total_tokens` (N + 5), then `data: [DONE]` (the
//! benchmark's `cost-sse` and `proxy-sse` targets).

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Body, Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;

/// The demo's one good password.
const GOOD_PASSWORD: &str = "right";

/// Whether `path` is a login endpoint.
fn is_login(path: &str) -> bool {
    path == "/login" || path == "/api/login"
}

/// Whether a login attempt fails: `fail=1` in the query, or a JSON body whose `password` is
/// not the good one.
fn failed_login(query: Option<&str>, body: &[u8]) -> bool {
    let asked = query.is_some_and(|q| q.split('&').any(|pair| pair == "fail=1"));
    let password = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("password").cloned());
    let wrong = password.is_some_and(|p| p.as_str() != Some(GOOD_PASSWORD));
    asked || wrong
}

/// The `ms=N` of a login query: how long to hold the answer.
fn login_delay(req: &Request<Incoming>) -> Option<std::time::Duration> {
    if !is_login(req.uri().path()) {
        return None;
    }
    let ms = req
        .uri()
        .query()?
        .split('&')
        .find_map(|p| p.strip_prefix("ms="))?;
    ms.parse().ok().map(std::time::Duration::from_millis)
}

type AnswerBody = UnsyncBoxBody<Bytes, Infallible>;

/// The events of `/sse?events=N`: N chunks of a streamed chat completion, the last but one
/// with its usage, then `[DONE]`.
fn sse_events(n: u64) -> Vec<Bytes> {
    let mut out: Vec<Bytes> = (0..n.saturating_sub(2))
        .map(|i| {
            Bytes::from(format!(
                "data: {{\"id\":\"chatcmpl-demo\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"token{i} \"}}}}],\"usage\":null}}\n\n"
            ))
        })
        .collect();
    out.push(Bytes::from(format!(
        "data: {{\"id\":\"chatcmpl-demo\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{{\"prompt_tokens\":5,\"completion_tokens\":{n},\"total_tokens\":{}}}}}\n\n",
        n + 5
    )));
    out.push(Bytes::from_static(b"data: [DONE]\n\n"));
    out
}

async fn answer(req: Request<Incoming>) -> Result<Response<AnswerBody>, Infallible> {
    if req.uri().path() == "/sse" {
        let n = req
            .uri()
            .query()
            .and_then(|q| q.split('&').find_map(|p| p.strip_prefix("events=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or(20u64)
            .clamp(2, 10_000);
        let frames = sse_events(n)
            .into_iter()
            .map(|b| Ok::<_, Infallible>(Frame::data(b)));
        let mut response =
            Response::new(StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync());
        response.headers_mut().insert(
            "content-type",
            http::HeaderValue::from_static("text/event-stream"),
        );
        return Ok(response);
    }
    if let Some(delay) = login_delay(&req) {
        tokio::time::sleep(delay).await;
    }
    let (parts, incoming) = req.into_parts();
    let xff = parts
        .headers
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    // Read a request body to its end (a POSTed form or JSON), as a real endpoint would, so the
    // connection stays reusable; a request without one costs nothing here.
    let body = match incoming.is_end_stream() {
        true => Bytes::new(),
        false => incoming
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default(),
    };
    let path = parts.uri.path();
    let failed = is_login(path) && failed_login(parts.uri.query(), &body);
    let answer = serde_json::json!({
        "ok": !failed,
        "method": parts.method.as_str(),
        "path": path,
        "x_forwarded_for": xff,
    });
    let mut response = Response::new(Full::new(Bytes::from(answer.to_string())).boxed_unsync());
    if failed {
        *response.status_mut() = hyper::StatusCode::UNAUTHORIZED;
    }
    response.headers_mut().insert(
        "content-type",
        http::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9000".to_string())
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!("demo-upstream listening on {addr}");
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), hyper::service::service_fn(answer))
                .await;
        });
    }
}

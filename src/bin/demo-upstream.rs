//! A tiny demo upstream for the quick start and the benchmark: answers every request with a
//! short JSON body describing it. `demo-upstream [ADDR]` (default 127.0.0.1:9000).
//!
//! `/login` stands for a login endpoint whose outcome the caller picks: `401 Unauthorized` when
//! the query holds `fail=1`, 200 otherwise (the benchmark's `login-outcome` target sends half
//! its attempts that way, for a route that counts only failed logins), after `ms=N`
//! milliseconds when the query asks (the `login-leave` target's clients leave meanwhile).
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

/// Whether the request is a login attempt that fails: `/login` with `fail=1` in the query.
fn failed_login(req: &Request<Incoming>) -> bool {
    req.uri().path() == "/login"
        && req
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|pair| pair == "fail=1"))
}

/// The `ms=N` of a `/login` query: how long to hold the answer.
fn login_delay(req: &Request<Incoming>) -> Option<std::time::Duration> {
    if req.uri().path() != "/login" {
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
    let failed = failed_login(&req);
    if let Some(delay) = login_delay(&req) {
        tokio::time::sleep(delay).await;
    }
    let xff = req
        .headers()
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let body = serde_json::json!({
        "ok": !failed,
        "method": req.method().as_str(),
        "path": req.uri().path(),
        "x_forwarded_for": xff,
    });
    // Read a request body to its end (a POSTed form or JSON), as a real endpoint would, so the
    // connection stays reusable; a request without one costs nothing here.
    if !req.body().is_end_stream() {
        let _ = req.into_body().collect().await;
    }
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed_unsync());
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

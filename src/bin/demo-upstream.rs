//! A tiny demo upstream for the quick start and the benchmark: answers every request with a
//! short JSON body describing it. `demo-upstream [ADDR]` (default 127.0.0.1:9000).
//!
//! `/login` stands for a login endpoint whose outcome the caller picks: `401 Unauthorized` when
//! the query holds `fail=1`, 200 otherwise (the benchmark's `login-outcome` target sends half
//! its attempts that way, for a route that counts only failed logins), after `ms=N`
//! milliseconds when the query asks (the `login-leave` target's clients leave meanwhile).

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Incoming};
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

async fn answer(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
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
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
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

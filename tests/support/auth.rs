//! A real upstream that answers like the services slidegate protects: a login endpoint (`POST
//! /api/login`: 200 for the password `right`, 401 for anything else, after `?ms=N` milliseconds
//! when asked), `POST /echo` (the body it got) and anything else with 200 (an OTP sent); it
//! records every request it was sent: path, headers and body.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};

/// The requests an upstream was sent (path, headers, body), in arrival order.
type SeenBodies = Arc<Mutex<Vec<(String, http::HeaderMap, Vec<u8>)>>>;

/// An upstream that answers `POST /api/login` with 200 for the password `right` and 401 for
/// anything else (after `?ms=N` milliseconds when asked), `POST /api/otp/send` with 200, and
/// `POST /echo` with the body it got; it records every body it was sent.
pub struct AuthUpstream {
    addr: SocketAddr,
    bodies: SeenBodies,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for AuthUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl AuthUpstream {
    pub async fn start() -> AuthUpstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let bodies: SeenBodies = Arc::default();
        let seen = bodies.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let seen = seen.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let seen = seen.clone();
                        async move { Ok::<_, Infallible>(answer(req, &seen).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        AuthUpstream { addr, bodies, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bodies posted to `path`, in arrival order.
    pub fn bodies(&self, path: &str) -> Vec<Vec<u8>> {
        let all = self.bodies.lock().unwrap();
        all.iter()
            .filter(|(p, _, _)| p == path)
            .map(|(_, _, b)| b.clone())
            .collect()
    }

    /// The headers of the requests to `path`, in arrival order.
    pub fn heads(&self, path: &str) -> Vec<http::HeaderMap> {
        let all = self.bodies.lock().unwrap();
        all.iter()
            .filter(|(p, _, _)| p == path)
            .map(|(_, h, _)| h.clone())
            .collect()
    }

    /// The bodies posted to `path`, as text, in arrival order.
    pub fn texts(&self, path: &str) -> Vec<String> {
        self.bodies(path)
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect()
    }
}

async fn answer(
    req: Request<Incoming>,
    seen: &Mutex<Vec<(String, http::HeaderMap, Vec<u8>)>>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let headers = req.headers().clone();
    let wait = req
        .uri()
        .query()
        .and_then(|q| q.strip_prefix("ms="))
        .and_then(|ms| ms.parse::<u64>().ok());
    let body = req.into_body().collect().await.map(|b| b.to_bytes());
    let body = body.unwrap_or_default();
    seen.lock()
        .unwrap()
        .push((path.clone(), headers, body.to_vec()));
    if let Some(ms) = wait {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let (status, text) = match path.as_str() {
        "/api/login" => {
            let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            match json.get("password").and_then(|p| p.as_str()) {
                Some("right") => (200, Bytes::from_static(b"welcome")),
                _ => (401, Bytes::from_static(b"wrong password")),
            }
        }
        "/echo" => (200, body),
        _ => (200, Bytes::from_static(b"sent")),
    };
    let mut response = Response::new(Full::new(text));
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
    response
}

//! A small real HTTP client for tests (hyper, keep-alive).

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// A response, fully read.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.body))
    }

    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A keep-alive client.
#[derive(Clone)]
pub struct HttpClient {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Default for HttpClient {
    fn default() -> Self {
        HttpClient {
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }
}

impl HttpClient {
    /// A client that speaks HTTP/2 without upgrade (prior knowledge), as a gRPC client does.
    pub fn http2() -> Self {
        HttpClient {
            client: Client::builder(TokioExecutor::new())
                .http2_only(true)
                .build_http(),
        }
    }

    /// Sends a request with headers and a body; fails the test after 10 s.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Reply {
        self.send_bytes(method, url, headers, body.as_bytes().to_vec())
            .await
    }

    /// Sends a request with headers and a body of any bytes; fails the test after 10 s.
    pub async fn send_bytes(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Reply {
        let mut req = Request::builder().method(method).uri(url);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(Bytes::from(body))).unwrap();
        let fut = async {
            let resp = self.client.request(req).await.expect("request sent");
            let (parts, body) = resp.into_parts();
            let body = body.collect().await.expect("body read").to_bytes();
            Reply {
                status: parts.status,
                headers: parts.headers,
                body: String::from_utf8_lossy(&body).into_owned(),
            }
        };
        tokio::time::timeout(Duration::from_secs(10), fut)
            .await
            .expect("response within 10 s")
    }

    /// Sends a request and answers once the response head has arrived; its body is the
    /// caller's to read as it streams (or to drop, which closes the connection). Fails the test
    /// after 10 s.
    pub async fn open(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> hyper::Response<hyper::body::Incoming> {
        let mut req = Request::builder().method(method).uri(url);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(Bytes::from(body.to_string()))).unwrap();
        tokio::time::timeout(Duration::from_secs(10), self.client.request(req))
            .await
            .expect("response head within 10 s")
            .expect("request sent")
    }

    /// GET with headers.
    pub async fn get(&self, url: &str, headers: &[(&str, &str)]) -> Reply {
        self.send(Method::GET, url, headers, "").await
    }
}

impl HttpClient {
    /// GETs every URL at once; returns each status with the time it took since the call, in
    /// completion order.
    pub async fn get_concurrently(&self, urls: Vec<String>) -> Vec<(u16, Duration)> {
        let started = std::time::Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for url in urls {
            let client = self.clone();
            tasks.spawn(async move {
                (
                    client.get(&url, &[]).await.status.as_u16(),
                    started.elapsed(),
                )
            });
        }
        let mut results = Vec::new();
        while let Some(r) = tasks.join_next().await {
            results.push(r.expect("request task"));
        }
        results
    }
}

impl HttpClient {
    /// The status of a GET with headers.
    pub async fn status(&self, url: &str, headers: &[(&str, &str)]) -> u16 {
        self.get(url, headers).await.status.as_u16()
    }
}

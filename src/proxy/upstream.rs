//! One pooled, keep-alive HTTP client per upstream. Bodies are streamed both ways: the client's
//! `Incoming` body is handed to the upstream as it is, and the upstream's body comes back the same
//! way. Only the response head is bounded by the upstream's `timeout`; a long download is not cut.
//! Connects are retried within `connect_timeout` ([`super::connect`]).

use std::net::IpAddr;
use std::time::Duration;

use http::header::HOST;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderValue, Request, Response, Uri, Version};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::connect::RetryConnect;
use super::headers::{remove_hop_by_hop, set_forwarded};
use crate::config::UpstreamConfig;
use crate::error::GatewayError;
use crate::request_id::{RequestId, X_REQUEST_ID};

/// A configured upstream with its connection pool.
pub struct Upstream {
    /// The config it was built from (reused across reloads while unchanged).
    pub config: UpstreamConfig,
    scheme: Scheme,
    authority: Authority,
    host: HeaderValue,
    base_path: String,
    client: Client<RetryConnect<HttpsConnector<HttpConnector>>, Incoming>,
}

impl Upstream {
    /// Builds the upstream's client; connections open lazily and are kept alive.
    pub fn new(config: &UpstreamConfig) -> Upstream {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(config.connect_timeout));
        http.set_keepalive(Some(Duration::from_secs(60)));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
            .expect("ring provider supports the default TLS versions")
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let connector = RetryConnect::new(connector, config.connect_timeout);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(1024)
            .build(connector);
        let scheme = config.url.scheme().cloned().unwrap_or(Scheme::HTTP);
        let authority = config
            .url
            .authority()
            .cloned()
            .expect("validated upstream URL has a host");
        let host = HeaderValue::from_str(authority.as_str())
            .expect("an authority is a valid header value");
        let base_path = config.url.path().trim_end_matches('/').to_string();
        Upstream {
            config: config.clone(),
            scheme,
            authority,
            host,
            base_path,
            client,
        }
    }

    /// Sends `req` upstream and returns the response head with its body still streaming.
    pub async fn forward(
        &self,
        mut req: Request<Incoming>,
        peer: IpAddr,
        peer_trusted: bool,
        request_id: &RequestId,
    ) -> Result<Response<Incoming>, GatewayError> {
        let original_host = req.headers().get(HOST).cloned().or_else(|| {
            req.uri()
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        });
        *req.uri_mut() = self.upstream_uri(req.uri());
        *req.version_mut() = Version::HTTP_11;
        let headers = req.headers_mut();
        remove_hop_by_hop(headers);
        set_forwarded(headers, peer, peer_trusted, original_host);
        headers.insert(HOST, self.host.clone());
        headers.insert(X_REQUEST_ID.clone(), request_id.header_value().clone());

        let sent = tokio::time::timeout(self.config.timeout, self.client.request(req)).await;
        let mut response = match sent {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                tracing::warn!(upstream = %self.config.name, error = %error_chain(&e), "upstream request failed");
                return Err(GatewayError::UpstreamConnect {
                    upstream: self.config.name.clone(),
                });
            }
            Err(_) => {
                return Err(GatewayError::UpstreamTimeout {
                    upstream: self.config.name.clone(),
                    timeout_ms: self.config.timeout.as_millis(),
                })
            }
        };
        remove_hop_by_hop(response.headers_mut());
        Ok(response)
    }

    fn upstream_uri(&self, uri: &Uri) -> Uri {
        let pq = uri.path_and_query().map_or("/", PathAndQuery::as_str);
        let path_and_query = if self.base_path.is_empty() {
            PathAndQuery::from_maybe_shared(bytes::Bytes::copy_from_slice(pq.as_bytes()))
        } else {
            format!("{}{}", self.base_path, pq).parse()
        };
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(self.scheme.clone());
        parts.authority = Some(self.authority.clone());
        parts.path_and_query =
            Some(path_and_query.unwrap_or_else(|_| PathAndQuery::from_static("/")));
        Uri::from_parts(parts).expect("scheme, authority and path make a URI")
    }
}

/// An error and its causes on one line, for logs.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

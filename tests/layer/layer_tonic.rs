//! The embedded `RateLimitLayer` in front of a tonic server (README, "Embedding: the tower
//! layer"): tonic gives each request its peer address as `TcpConnectInfo`, which the layer
//! reads for `ip` keys and `trusted_proxies` as it reads axum's `ConnectInfo`. Without it every
//! client would be one unknown peer: no forwarding header believed, one quota for all.

use crate::support;

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use slidegate::layer::{MatchedRoute, RequestBody};
use slidegate::RateLimitLayer;
use support::http::HttpClient;
use support::layer::{decisions, BEHIND_A_BALANCER};

/// A gRPC-like inner service: answers every call with `grpc-status: 0` and the client IP the
/// layer counted (`x-client-ip`).
async fn answer(
    req: http::Request<RequestBody<tonic::body::Body>>,
) -> Result<http::Response<Full<Bytes>>, Infallible> {
    let ip = req
        .extensions()
        .get::<MatchedRoute>()
        .map_or("-".to_string(), |m| m.client_ip.to_string());
    let response = http::Response::builder()
        .header("content-type", "application/grpc")
        .header("grpc-status", "0")
        .header("x-client-ip", ip)
        .body(Full::new(Bytes::new()))
        .unwrap();
    Ok(response)
}

/// Serves `layer` in front of [`answer`] with tonic's transport server on 127.0.0.1:0.
async fn serve_tonic(layer: RateLimitLayer) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .layer(layer)
            .serve_with_incoming(tower::service_fn(answer), incoming)
            .await
            .unwrap();
    });
    addr
}

/// Two clients behind a trusted balancer (the loopback peer), each named by its own
/// `X-Forwarded-For`, call the OTP route of a layer file (1 per client IP per hour) through a
/// tonic server: each gets its own count, the service sees each one's address, and a client's
/// second call is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tonic_peers_are_keyed_like_axum_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.toml");
    std::fs::write(&path, BEHIND_A_BALANCER).unwrap();
    let layer = RateLimitLayer::from_file(&path).await.unwrap();
    let addr = serve_tonic(layer.clone()).await;
    let client = HttpClient::http2();
    let url = format!("http://{addr}/otp/send");
    let call = |ip: &'static str| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let forwarded = format!("{ip}, 127.0.0.1");
            let headers = [
                ("content-type", "application/grpc"),
                ("x-forwarded-for", forwarded.as_str()),
            ];
            client.send(http::Method::POST, &url, &headers, "").await
        }
    };
    for ip in ["198.51.100.1", "198.51.100.2"] {
        let r = call(ip).await;
        assert_eq!(r.status, 200, "{ip}'s first call: {}", r.body);
        assert_eq!(r.header("x-client-ip"), Some(ip), "the service sees {ip}");
    }
    let again = call("198.51.100.1").await;
    assert_eq!(again.status, 429, "198.51.100.1's second call");
    let metrics = layer.scrape();
    assert_eq!(decisions(&metrics, "otp", "allowed"), 2.0);
    assert_eq!(decisions(&metrics, "otp", "rejected"), 1.0);
}

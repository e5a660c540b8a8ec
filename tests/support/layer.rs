//! An axum `Router` (with a `slidegate::RateLimitLayer`) served on a real loopback listener, and
//! reading the layer's metrics.

use std::net::SocketAddr;

use axum::Router;

use super::metrics;

/// Serves `app` on 127.0.0.1:0 with the peer address as `ConnectInfo`; returns its address.
pub async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

pub fn count(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    metrics::value(text, name, labels).unwrap_or(0.0)
}

pub fn decisions(text: &str, route: &str, decision: &str) -> f64 {
    count(
        text,
        "slidegate_requests_total",
        &[("route", route), ("decision", decision)],
    )
}

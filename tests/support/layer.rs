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

/// A layer file behind a load balancer (here the test's own loopback client, trusted) with the
/// OTP route of the issue that found the need: 1 code per client IP per hour.
pub const BEHIND_A_BALANCER: &str = r#"[server]
trusted_proxies = ["127.0.0.1/32"]      # the load balancer
client_ip_header = "x-forwarded-for"
ipv6_prefix = 56

[store]
backend = "memory"

[[routes]]
name = "otp"
path = "/otp/send"
methods = ["POST"]
  [[routes.limits]]
  name = "per-ip"
  limit = 1
  window = "1h"
"#;

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

/// The process's log lines (every level, plain text), captured from the first call on: an
/// in-process layer logs through `tracing`, and this subscriber is the process's global one.
pub fn captured_logs() -> &'static std::sync::Mutex<Vec<u8>> {
    use std::sync::{Mutex, OnceLock};
    static LOGS: OnceLock<&'static Mutex<Vec<u8>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs: &'static Mutex<Vec<u8>> = Box::leak(Box::new(Mutex::new(Vec::new())));
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || LogWriter(logs))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("no other global subscriber");
        logs
    })
}

/// Appends to the captured logs.
struct LogWriter(&'static std::sync::Mutex<Vec<u8>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The lines of the captured logs that contain `needle`.
pub fn log_lines_with(needle: &str) -> Vec<String> {
    let logs = captured_logs().lock().unwrap();
    String::from_utf8_lossy(&logs)
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

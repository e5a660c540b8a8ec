//! The load's HTTP/1.1 client: a keep-alive connection, opened again when it is gone, and
//! what a whole answer tells.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

use super::Load;
use crate::Outcome;

/// A connection to the gateway, if one is open.
pub type Conn = Option<SendRequest<Empty<Bytes>>>;

/// A whole answer, as far as the load cares.
pub struct Answer {
    /// Its status.
    pub status: u16,
    /// Whether it carries the store's rate-limit headers.
    pub decided: bool,
    /// Its `X-RateLimit-Remaining`, if any.
    pub remaining: Option<u64>,
}

/// Sends one GET on the connection (opening one when there is none or it was closed) and
/// reads the whole answer.
pub async fn request(
    sender: &mut Conn,
    load: &Load,
    route: &str,
    user: &str,
) -> Result<Answer, Outcome> {
    // A connection the server closed between requests (keep-alive ended) is replaced silently:
    // no request was in flight on it.
    let usable = match sender.as_mut() {
        Some(s) => s.ready().await.is_ok(),
        None => false,
    };
    if !usable {
        *sender = Some(connect(load).await?);
    }
    let s = sender.as_mut().expect("a connection");
    s.ready().await.map_err(|_| Outcome::Reset)?;
    let req = http::Request::get(format!("/{route}/x"))
        .header(http::header::HOST, &load.host)
        .header("x-user", user)
        .body(Empty::new())
        .expect("a valid request");
    let response = s.send_request(req).await.map_err(|_| Outcome::Reset)?;
    let status = response.status().as_u16();
    let decided = response.headers().contains_key("ratelimit");
    let remaining = response
        .headers()
        .get("x-ratelimit-remaining")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    response
        .into_body()
        .collect()
        .await
        .map_err(|_| Outcome::Reset)?;
    Ok(Answer {
        status,
        decided,
        remaining,
    })
}

/// Opens a connection to the gateway (HTTP/1.1, no Nagle), driven by a task of its own.
async fn connect(load: &Load) -> Result<SendRequest<Empty<Bytes>>, Outcome> {
    let stream = tokio::net::TcpStream::connect(load.addr)
        .await
        .map_err(|_| Outcome::Connect)?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|_| Outcome::Connect)?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

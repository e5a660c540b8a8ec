//! A unary gRPC call sent as raw bytes over HTTP/2: a request a strict client could not encode
//! (a `string` field holding bytes that are not UTF-8, as Envoy may send).

use std::net::SocketAddr;

/// Calls `path` on `addr` with `message` (protobuf bytes); the answer's message bytes, or the
/// gRPC status when the call ended without one.
pub async fn raw_unary(addr: SocketAddr, path: &str, message: &[u8]) -> Result<Vec<u8>, String> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut h2, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    let request = http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (response, mut body) = h2.send_request(request, false).unwrap();
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(message);
    body.send_data(frame.into(), true).unwrap();
    let response = response.await.unwrap();
    let status_in_head = response.headers().get("grpc-status").cloned();
    let mut stream = response.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.data().await {
        let chunk = chunk.unwrap();
        stream.flow_control().release_capacity(chunk.len()).unwrap();
        bytes.extend_from_slice(&chunk);
    }
    let trailers = stream.trailers().await.unwrap().unwrap_or_default();
    let status = status_in_head.or_else(|| trailers.get("grpc-status").cloned());
    match status.as_ref().map(|s| s.to_str().unwrap()) {
        Some("0") if bytes.len() >= 5 => Ok(bytes[5..].to_vec()),
        other => Err(format!("grpc-status {other:?}, {trailers:?}")),
    }
}

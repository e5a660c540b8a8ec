//! RFC 9457 problem bodies: the members every one has, the response that carries one, and
//! hyper's own refusals re-written as one.

use axum::body::Body;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Response, StatusCode};

use crate::request_id::RequestId;

/// hyper's own refusal of a request it cannot parse (it answers 400, 414 or 431 before the
/// request reaches the gateway), re-written as the gateway's problem response: the whole HTTP/1.1
/// message, closing the connection, with a fresh request id. A target too long for hyper is a
/// head beyond the gateway's bound like any other (the target counts in `max_header_bytes`):
/// 431, whichever limit it met first. The answer to a `HEAD` request (`head`) has no body, as
/// the gateway's other answers to one.
pub fn refusal_bytes(status: StatusCode, head: bool) -> Vec<u8> {
    let status = match status {
        StatusCode::URI_TOO_LONG => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        other => other,
    };
    let (code, detail) = match status.as_u16() {
        431 => (
            "request_head_too_large",
            "the request head is larger than the gateway reads",
        ),
        _ => (
            "malformed_request",
            "the request could not be parsed as HTTP",
        ),
    };
    let request_id = RequestId::generate();
    let body =
        serde_json::Value::Object(problem_body(status, code, detail, &request_id)).to_string();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\nx-request-id: {}\r\nconnection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("Error"),
        body.len(),
        request_id
    )
    .into_bytes();
    if !head {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

/// The members every problem body has: `about:blank` type, the status's reason as title, the
/// snake_case `error` code, the `detail` message and the `request_id`.
pub fn problem_body(
    status: StatusCode,
    code: &str,
    detail: &str,
    request_id: &RequestId,
) -> serde_json::Map<String, serde_json::Value> {
    let mut body = serde_json::Map::new();
    body.insert("type".into(), "about:blank".into());
    body.insert(
        "title".into(),
        status.canonical_reason().unwrap_or("Error").into(),
    );
    body.insert("status".into(), status.as_u16().into());
    body.insert("error".into(), code.into());
    body.insert("detail".into(), detail.into());
    body.insert("request_id".into(), request_id.as_str().into());
    body
}

/// A problem response with the members of [`problem_body`].
pub fn problem(
    status: StatusCode,
    code: &str,
    detail: &str,
    request_id: &RequestId,
) -> Response<Body> {
    problem_response(
        status,
        problem_body(status, code, detail, request_id),
        request_id,
    )
}

/// Serialises a problem body with its status, content type and `X-Request-Id`.
pub fn problem_response(
    status: StatusCode,
    body: serde_json::Map<String, serde_json::Value>,
    request_id: &RequestId,
) -> Response<Body> {
    let text = serde_json::Value::Object(body).to_string();
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    headers.insert(
        crate::request_id::X_REQUEST_ID.clone(),
        request_id.header_value().clone(),
    );
    response
}

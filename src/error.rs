//! The one place where request-path failures become HTTP responses: every error a client can
//! get, its status, and its RFC 9457 `application/problem+json` body
//! (`{"type","title","status","error","detail"}`, `error` a snake_case code).
//! Clients get a short message; the detail goes to the log where the error arose.

use axum::body::Body;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, Response, StatusCode};

/// Why the gateway answered instead of the upstream (rate-limit 429s are in `limit::response`).
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The request path has no safe normal form (see [`crate::route::normalize`]).
    #[error("{0}")]
    BadPath(#[from] crate::route::PathError),
    /// No route takes this method and path.
    #[error("no route matches {method} {path}")]
    NoRoute {
        /// Request method.
        method: String,
        /// Request path.
        path: String,
    },
    /// The route's key needs a part the request lacks.
    #[error("{0}")]
    MissingKey(#[from] crate::key::MissingKeyPart),
    /// The store failed and the route fails closed.
    #[error("rate-limit store unavailable")]
    StoreUnavailable,
    /// The upstream refused or broke the connection.
    #[error("upstream {upstream} unreachable")]
    UpstreamConnect {
        /// Upstream name.
        upstream: String,
    },
    /// No response head within the upstream's timeout.
    #[error("upstream {upstream} did not answer within {timeout_ms} ms")]
    UpstreamTimeout {
        /// Upstream name.
        upstream: String,
        /// The configured timeout.
        timeout_ms: u128,
    },
}

impl GatewayError {
    /// The status and machine-readable code of this error.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            GatewayError::BadPath(e) => (StatusCode::BAD_REQUEST, e.code()),
            GatewayError::NoRoute { .. } => (StatusCode::NOT_FOUND, "no_route"),
            GatewayError::MissingKey(_) => (StatusCode::BAD_REQUEST, "missing_key"),
            GatewayError::StoreUnavailable => {
                (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable")
            }
            GatewayError::UpstreamConnect { .. } => {
                (StatusCode::BAD_GATEWAY, "upstream_unreachable")
            }
            GatewayError::UpstreamTimeout { .. } => {
                (StatusCode::GATEWAY_TIMEOUT, "upstream_timeout")
            }
        }
    }

    /// The response the client gets.
    pub fn into_response(self) -> Response<Body> {
        let (status, code) = self.status_and_code();
        let mut response = json_error(status, code, &self.to_string());
        if matches!(self, GatewayError::StoreUnavailable) {
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

/// An RFC 9457 problem response: `about:blank` type, the status's reason as title, `error` the
/// snake_case code and `detail` the message.
pub fn json_error(status: StatusCode, code: &str, message: &str) -> Response<Body> {
    let body = serde_json::json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "error": code,
        "detail": message,
    });
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}

//! The one place where failures become responses: every error the gateway answers itself, on
//! the proxy and forward-auth listeners ([`GatewayError`]) or the admin listener
//! ([`AdminError`]), its status, and its RFC 9457 `application/problem+json` body:
//! `{"type","title","status","error","detail","request_id"}`, `error` a snake_case code; and
//! the gRPC status of a rate-limit service request it cannot take (`RlsError`).
//! Clients get a short message; the detail goes to the log where the error arose.
//!
//! The 429 of a rate limit is not here: a rejection is a response, not an error, and is built by
//! `limit::headers` with the same members plus the limit's.

use axum::body::Body;
use http::header::{CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use http::{HeaderValue, Response, StatusCode};

use crate::request_id::RequestId;

pub use crate::limit::STORE_UNAVAILABLE_RETRY_SECS;

/// Why the gateway answered a proxied request itself (rate-limit 429s are in `limit::headers`).
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// Refused before routing, or no route takes the request.
    #[error(transparent)]
    Route(#[from] crate::route::RouteError),
    /// A forward-auth subrequest that does not say which request it asks about.
    #[error(transparent)]
    Original(#[from] crate::forward_auth::OriginalError),
    /// The route's key needs a part the request lacks, or names twice.
    #[error(transparent)]
    Key(#[from] crate::key::KeyError),
    /// `[plans] unknown = "reject"` and the key is on no plan.
    #[error("the key is on no plan of this API")]
    UnknownKey,
    /// A body read for key parts is larger than `max_key_body_bytes`.
    #[error(
        "the request body is over {max} bytes, the most this route reads for its rate-limit key"
    )]
    BodyTooLarge {
        /// The bound.
        max: usize,
    },
    /// A body read for key parts is compressed.
    #[error("the request body has Content-Encoding `{encoding}`; this route reads its rate-limit key from the body and takes it unencoded")]
    UnsupportedBodyEncoding {
        /// The encoding sent.
        encoding: String,
    },
    /// A body read for key parts did not arrive in time.
    #[error("the request body did not arrive within {timeout_ms} ms")]
    BodyTimeout {
        /// `server.header_read_timeout`.
        timeout_ms: u128,
    },
    /// The request body broke off or was malformed (bad chunk framing), read for key parts or
    /// on its way upstream.
    #[error("the request body could not be read: {0}")]
    BodyUnreadable(String),
    /// `Connection` names a header the request's meaning rests on: forwarding without it would
    /// send another request than the one counted.
    #[error("the Connection header names {header}, which this request cannot go without; send Connection with hop-by-hop headers only")]
    ConnectionRemoves {
        /// The header named.
        header: String,
    },
    /// The store failed and the route fails closed.
    #[error("the rate-limit store is unavailable")]
    StoreUnavailable,
    /// The upstream refused or broke the connection.
    #[error("upstream {upstream} is unreachable")]
    UpstreamConnect {
        /// Upstream name.
        upstream: String,
    },
    /// No response head within the upstream's timeout after the request was sent.
    #[error("upstream {upstream} did not answer within {timeout_ms} ms")]
    UpstreamTimeout {
        /// Upstream name.
        upstream: String,
        /// The configured timeout.
        timeout_ms: u128,
    },
}

impl From<crate::limit::KeysError> for GatewayError {
    fn from(e: crate::limit::KeysError) -> Self {
        match e {
            crate::limit::KeysError::Key(k) => GatewayError::Key(k),
            crate::limit::KeysError::UnknownKey => GatewayError::UnknownKey,
        }
    }
}

impl GatewayError {
    /// The status and machine-readable code of this error.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        use crate::route::RouteError;
        match self {
            GatewayError::Route(RouteError::BadPath(e)) => (StatusCode::BAD_REQUEST, e.code()),
            GatewayError::Route(RouteError::BadHost(_)) => (StatusCode::BAD_REQUEST, "bad_host"),
            GatewayError::Route(RouteError::HeadTooLarge { .. }) => (
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "request_head_too_large",
            ),
            GatewayError::Route(RouteError::NoRoute { .. }) => (StatusCode::NOT_FOUND, "no_route"),
            GatewayError::Original(e) => (StatusCode::BAD_REQUEST, e.code()),
            // A value that is not one (not a phone number) is a missing part: the same code,
            // its own detail.
            GatewayError::Key(
                crate::key::KeyError::Missing { .. } | crate::key::KeyError::Invalid { .. },
            ) => (StatusCode::BAD_REQUEST, "missing_key"),
            GatewayError::Key(
                crate::key::KeyError::Ambiguous { .. } | crate::key::KeyError::Unclear { .. },
            ) => (StatusCode::BAD_REQUEST, "ambiguous_key"),
            GatewayError::UnknownKey => (StatusCode::FORBIDDEN, "unknown_key"),
            GatewayError::BodyTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
            GatewayError::UnsupportedBodyEncoding { .. } => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_body_encoding",
            ),
            GatewayError::BodyTimeout { .. } => (StatusCode::REQUEST_TIMEOUT, "body_timeout"),
            GatewayError::BodyUnreadable(_) => (StatusCode::BAD_REQUEST, "body_unreadable"),
            GatewayError::ConnectionRemoves { .. } => (StatusCode::BAD_REQUEST, "bad_request"),
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

    /// Whether the request was refused for what the client sent (counted as `bad_request`).
    pub fn is_bad_request(&self) -> bool {
        matches!(
            self,
            GatewayError::Key(_)
                | GatewayError::UnknownKey
                | GatewayError::BodyTooLarge { .. }
                | GatewayError::UnsupportedBodyEncoding { .. }
                | GatewayError::BodyTimeout { .. }
                | GatewayError::BodyUnreadable(_)
                | GatewayError::ConnectionRemoves { .. }
        )
    }

    /// The response the client gets.
    pub fn into_response(self, request_id: &RequestId) -> Response<Body> {
        let (status, code) = self.status_and_code();
        let mut response = problem(status, code, &self.to_string(), request_id);
        if matches!(self, GatewayError::StoreUnavailable) {
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(STORE_UNAVAILABLE_RETRY_SECS));
        }
        if matches!(self, GatewayError::BodyTimeout { .. }) {
            response
                .headers_mut()
                .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// Why the admin listener refused a request.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// No or a wrong bearer token.
    #[error("missing or wrong bearer token")]
    Unauthorized,
    /// No token is configured, so nothing protected is served.
    #[error(
        "no admin token is configured: set the environment variable {env} and restart (a reload keeps the environment the gateway started with)"
    )]
    TokenNotConfigured {
        /// The variable `admin.token_env` names.
        env: String,
    },
    /// A malformed request (query parameters, JSON body).
    #[error("{0}")]
    BadRequest(String),
    /// No route by that name.
    #[error("no route named `{0}`")]
    UnknownRoute(String),
    /// No such admin endpoint.
    #[error("no such admin endpoint")]
    NotFound,
    /// The endpoint exists, but not for this method (`Allow` names the ones it takes).
    #[error("this endpoint does not take this method; see the Allow header")]
    MethodNotAllowed,
    /// A request body larger than the endpoint reads.
    #[error("the body is over {max} bytes")]
    BodyTooLarge {
        /// The bound.
        max: usize,
    },
    /// A number the endpoint takes is out of its range (the problem body names the field).
    #[error("{field}: {why}")]
    OutOfRange {
        /// The code (`cost_out_of_range`).
        code: &'static str,
        /// The field.
        field: String,
        /// What is allowed.
        why: String,
    },
    /// The route's limits need the response (outcomes, slots in flight, costs from the
    /// answer), which the batch API has none of: the route, and what its limits do.
    #[error("route `{0}` {1}: a batch decision has no response to read, so this route cannot be decided here")]
    RouteCountsOutcomes(String, &'static str),
    /// A batch larger than the API takes.
    #[error("{keys} keys in one call; the most is {max}")]
    TooManyKeys {
        /// Keys sent.
        keys: usize,
        /// The bound.
        max: usize,
    },
    /// A JSON body that parses but does not have the fields and types the endpoint takes.
    #[error("{0}")]
    InvalidBody(String),
    /// A reload whose file does not validate.
    #[error("{0}")]
    InvalidConfig(String),
    /// Raw values (`value=`) that make no key of the route: the problem body names the part.
    #[error("{0}")]
    InvalidValue(#[from] crate::key::ValueError),
    /// The store did not answer.
    #[error("the rate-limit store is unavailable: {0}")]
    StoreUnavailable(String),
    /// Anything else.
    #[error("{0}")]
    Internal(String),
}

impl AdminError {
    /// The status and machine-readable code of this error.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            AdminError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            AdminError::TokenNotConfigured { .. } => {
                (StatusCode::FORBIDDEN, "admin_token_not_configured")
            }
            AdminError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            AdminError::UnknownRoute(_) => (StatusCode::NOT_FOUND, "unknown_route"),
            AdminError::NotFound => (StatusCode::NOT_FOUND, "not_found"),
            AdminError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            AdminError::BodyTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
            AdminError::TooManyKeys { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "too_many_keys"),
            AdminError::OutOfRange { code, .. } => (StatusCode::BAD_REQUEST, code),
            AdminError::RouteCountsOutcomes(..) => {
                (StatusCode::BAD_REQUEST, "route_counts_outcomes")
            }
            AdminError::InvalidValue(_) => (StatusCode::BAD_REQUEST, "invalid_value"),
            AdminError::InvalidBody(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body"),
            AdminError::InvalidConfig(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_config"),
            AdminError::StoreUnavailable(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable")
            }
            AdminError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }

    /// The response the client gets.
    pub fn into_response(self, request_id: &RequestId) -> Response<Body> {
        let (status, code) = self.status_and_code();
        let mut body = problem_body(status, code, &self.to_string(), request_id);
        match &self {
            AdminError::OutOfRange { field, .. } => {
                body.insert("field".into(), field.as_str().into());
            }
            AdminError::InvalidValue(crate::key::ValueError::Invalid { part, .. }) => {
                body.insert("part".into(), part.as_str().into());
            }
            _ => {}
        }
        let mut response = problem_response(status, body, request_id);
        if matches!(self, AdminError::Unauthorized) {
            response
                .headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// hyper's own refusal of a request it cannot parse (it answers 400, 414 or 431 before the
/// request reaches the gateway), re-written as the gateway's problem response: the whole HTTP/1.1
/// message, closing the connection, with a fresh request id. A target too long for hyper is a
/// head beyond the gateway's bound like any other (the target counts in `max_header_bytes`):
/// 431, whichever limit it met first.
pub fn refusal_bytes(status: StatusCode) -> Vec<u8> {
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
    out.extend_from_slice(body.as_bytes());
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

impl From<crate::rls::RlsError> for tonic::Status {
    fn from(e: crate::rls::RlsError) -> tonic::Status {
        match e {
            crate::rls::RlsError::Invalid(_) => tonic::Status::invalid_argument(e.to_string()),
        }
    }
}

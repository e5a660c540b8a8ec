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
use http::header::RETRY_AFTER;
use http::{HeaderValue, Response, StatusCode};

use crate::request_id::RequestId;

mod admin;
mod original;
mod problem;

pub use admin::AdminError;
pub use original::OriginalError;
pub use problem::{problem, problem_body, problem_response, refusal_bytes};

pub use crate::limit::STORE_UNAVAILABLE_RETRY_SECS;

/// Why the gateway answered a proxied request itself (rate-limit 429s are in `limit::headers`).
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// Refused before routing, or no route takes the request.
    #[error(transparent)]
    Route(#[from] crate::route::RouteError),
    /// A forward-auth subrequest that does not say which request it asks about.
    #[error(transparent)]
    Original(#[from] OriginalError),
    /// The route's key needs a part the request lacks, or names twice.
    #[error(transparent)]
    Key(#[from] crate::key::KeyError),
    /// `[plans] unknown = "reject"` and the key is on no plan.
    #[error("the key is on no plan of this API")]
    UnknownKey,
    /// The request states a cost its limits could never allow, or states it twice.
    #[error(transparent)]
    CostOutOfRange(#[from] crate::cost::CostOutOfRange),
    /// A body read for key parts is larger than `max_key_body_bytes`.
    #[error(
        "the request body is over {max} bytes, the most this route reads for its rate-limit key"
    )]
    BodyTooLarge {
        /// The bound.
        max: usize,
    },
    /// A body read for key parts is compressed.
    #[error("the request body has Content-Encoding `{encoding}`; this route reads its rate-limit key or its cost from the body and takes it unencoded")]
    UnsupportedBodyEncoding {
        /// The encoding sent.
        encoding: String,
    },
    /// A body read for key parts did not arrive in time, or one on its way upstream stopped
    /// coming.
    #[error("the request body did not arrive within {timeout_ms} ms")]
    BodyTimeout {
        /// `server.header_read_timeout`, or the upstream's `timeout` (the longest a body on its
        /// way may stand still).
        timeout_ms: u128,
    },
    /// The request body broke off or was malformed (bad chunk framing), read for key parts or
    /// on its way upstream.
    #[error("the request body could not be read: {0}")]
    BodyUnreadable(String),
    /// The client ended its side before its request body was whole (closed its connection,
    /// reset its HTTP/2 stream): the access log says 499, as for any client that left before
    /// its answer ([`ClientClosed`]); one that only half-closed still reads a 400. Nothing
    /// the client sent was refused: it is no `bad_request`.
    #[error(
        "the request body could not be read: the client closed its side before the body was whole"
    )]
    ClientLeft,
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

/// The status an access log line shows for a request whose client left before its answer
/// (NGINX's "client closed request").
pub const CLIENT_CLOSED_REQUEST: u16 = 499;

/// On an answer: its client closed its side before its request was whole, so the access log
/// shows [`CLIENT_CLOSED_REQUEST`], whatever status goes out (a client that only half-closed
/// still reads it).
#[derive(Debug, Clone, Copy)]
pub struct ClientClosed;

impl GatewayError {
    /// A request body that failed as it was read: [`GatewayError::ClientLeft`] when the
    /// client ended its side before the body was whole (anywhere in the error's chain: an
    /// unexpected end of its HTTP/1.1 stream, or a connection it reset; an HTTP/2 stream it
    /// reset, a GOAWAY it sent, a connection that failed under the stream), else
    /// [`GatewayError::BodyUnreadable`] (bad chunk framing, a body short of its length at the
    /// end of an HTTP/2 stream).
    pub fn of_body(e: &(dyn std::error::Error + 'static)) -> GatewayError {
        use std::io::ErrorKind;
        let gone = [
            ErrorKind::UnexpectedEof,
            ErrorKind::ConnectionReset,
            ErrorKind::ConnectionAborted,
        ];
        let mut cause = Some(e);
        while let Some(c) = cause {
            let io = c.downcast_ref::<std::io::Error>().map(std::io::Error::kind);
            if io.is_some_and(|kind| gone.contains(&kind)) {
                return GatewayError::ClientLeft;
            }
            if let Some(h2) = c.downcast_ref::<h2::Error>() {
                if h2.is_remote() || h2.is_io() {
                    return GatewayError::ClientLeft;
                }
            }
            cause = c.source();
        }
        GatewayError::BodyUnreadable(error_chain(e))
    }

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
            GatewayError::Route(RouteError::ChunkedTwice) => {
                (StatusCode::BAD_REQUEST, "bad_request")
            }
            GatewayError::Route(RouteError::TransferCoding(_)) => (
                StatusCode::NOT_IMPLEMENTED,
                "transfer_coding_not_implemented",
            ),
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
            GatewayError::CostOutOfRange(crate::cost::CostOutOfRange::Range { .. }) => {
                (StatusCode::BAD_REQUEST, "cost_out_of_range")
            }
            GatewayError::CostOutOfRange(crate::cost::CostOutOfRange::Ambiguous { .. }) => {
                (StatusCode::BAD_REQUEST, "ambiguous_cost")
            }
            GatewayError::BodyTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
            GatewayError::UnsupportedBodyEncoding { .. } => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_body_encoding",
            ),
            GatewayError::BodyTimeout { .. } => (StatusCode::REQUEST_TIMEOUT, "body_timeout"),
            GatewayError::BodyUnreadable(_) => (StatusCode::BAD_REQUEST, "body_unreadable"),
            GatewayError::ClientLeft => (StatusCode::BAD_REQUEST, "body_unreadable"),
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
                | GatewayError::CostOutOfRange(_)
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
        if matches!(
            self,
            GatewayError::BodyTimeout { .. } | GatewayError::ClientLeft
        ) {
            response
                .headers_mut()
                .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        }
        if matches!(self, GatewayError::ClientLeft) {
            response.extensions_mut().insert(ClientClosed);
        }
        response
    }
}

impl From<crate::rls::RlsError> for tonic::Status {
    fn from(e: crate::rls::RlsError) -> tonic::Status {
        match e {
            crate::rls::RlsError::Invalid(_) => tonic::Status::invalid_argument(e.to_string()),
        }
    }
}

/// An error and its causes on one line, for logs.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

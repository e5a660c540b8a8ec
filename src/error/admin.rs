//! Why the admin listener refused a request, its status and problem body.

use axum::body::Body;
use http::header::WWW_AUTHENTICATE;
use http::{HeaderValue, Response, StatusCode};

use super::problem::{problem_body, problem_response};
use crate::request_id::RequestId;

/// Why the admin listener refused a request.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// No or a wrong bearer token.
    #[error("missing or wrong bearer token")]
    Unauthorized,
    /// No token is configured, so nothing protected is served.
    #[error(
        "no admin token is configured: set the environment variable {env} (not empty) and restart (a reload keeps the environment the gateway started with)"
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

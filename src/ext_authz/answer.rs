//! The layer's answer as a `CheckResponse`: a 2xx is `OK` with an `ok_response` whose
//! `response_headers_to_add` carry the rate-limit headers for Envoy to set on its response; any
//! other answer (the 429 of a limit, the 400 of a missing key, the 503 of a store that failed
//! closed) is `PERMISSION_DENIED` with a `denied_response` of that status, its headers and its
//! body, byte for byte the traffic path's answer, which Envoy sends to the client as it is.

use axum::body::Body;
use envoy_types::pb::envoy::config::core::v3::header_value_option::HeaderAppendAction;
use envoy_types::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption};
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{
    CheckResponse, DeniedHttpResponse, OkHttpResponse,
};
use envoy_types::pb::google::rpc::Status;
use http::header::CONTENT_LENGTH;
use http::{HeaderMap, Response};
use http_body_util::BodyExt;

use crate::header_case;
use crate::layer::ResponseBody;

/// `google.rpc.Code` OK.
const GRPC_OK: i32 = 0;
/// `google.rpc.Code` PERMISSION_DENIED: Envoy then sends the `denied_response`.
const GRPC_PERMISSION_DENIED: i32 = 7;

/// The `CheckResponse` of the layer's `response`.
pub async fn check_response(response: Response<ResponseBody<Body>>) -> CheckResponse {
    let (head, body) = response.into_parts();
    let headers = header_options(&head.headers);
    if head.status.is_success() {
        return CheckResponse {
            status: Some(Status {
                code: GRPC_OK,
                ..Status::default()
            }),
            http_response: Some(HttpResponse::OkResponse(OkHttpResponse {
                response_headers_to_add: headers,
                ..OkHttpResponse::default()
            })),
            ..CheckResponse::default()
        };
    }
    let bytes = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    CheckResponse {
        status: Some(Status {
            code: GRPC_PERMISSION_DENIED,
            message: head.status.to_string(),
            ..Status::default()
        }),
        http_response: Some(HttpResponse::DeniedResponse(DeniedHttpResponse {
            status: Some(HttpStatus {
                code: i32::from(head.status.as_u16()),
            }),
            headers,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        })),
        ..CheckResponse::default()
    }
}

/// The answer's headers, each set once (overwriting one of the same name), without its
/// `Content-Length` (Envoy frames what it sends), named as the specifications write them.
fn header_options(headers: &HeaderMap) -> Vec<HeaderValueOption> {
    headers
        .iter()
        .filter(|(name, _)| **name != CONTENT_LENGTH)
        .map(|(name, value)| HeaderValueOption {
            header: Some(HeaderValue {
                key: header_case::written(name.as_str()),
                value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
                ..HeaderValue::default()
            }),
            append_action: HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
            ..HeaderValueOption::default()
        })
        .collect()
}

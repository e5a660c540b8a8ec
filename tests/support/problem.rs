//! The one shape of every error the gateway answers itself: an RFC 9457
//! `application/problem+json` body with `type`, `title`, `status`, `error` (snake_case),
//! `detail` and `request_id`, the id also in `X-Request-Id`.

use super::http::Reply;
use super::raw::RawReply;

/// A response, whichever client read it.
pub trait Answer {
    fn status_code(&self) -> u16;
    fn header_value(&self, name: &str) -> Option<&str>;
    fn body_text(&self) -> &str;
}

impl Answer for Reply {
    fn status_code(&self) -> u16 {
        self.status.as_u16()
    }
    fn header_value(&self, name: &str) -> Option<&str> {
        self.header(name)
    }
    fn body_text(&self) -> &str {
        &self.body
    }
}

impl Answer for RawReply {
    fn status_code(&self) -> u16 {
        self.status
    }
    fn header_value(&self, name: &str) -> Option<&str> {
        self.header(name)
    }
    fn body_text(&self) -> &str {
        &self.body
    }
}

/// Asserts `answer` is a problem of this status and `error` code; returns the body.
pub fn assert_problem(
    answer: &(impl Answer + ?Sized),
    status: u16,
    error: &str,
) -> serde_json::Value {
    let what = format!("{status} {error}");
    assert_eq!(
        answer.status_code(),
        status,
        "{what}: body {}",
        answer.body_text()
    );
    assert_eq!(
        answer.header_value("content-type"),
        Some("application/problem+json"),
        "{what}"
    );
    let body: serde_json::Value = serde_json::from_str(answer.body_text())
        .unwrap_or_else(|e| panic!("{what}: body is not JSON ({e}): {}", answer.body_text()));
    let reason = http::StatusCode::from_u16(status)
        .unwrap()
        .canonical_reason()
        .unwrap();
    assert!(
        body["type"].as_str().is_some_and(|t| !t.is_empty()),
        "{what}: type in {body}"
    );
    assert_eq!(body["title"], reason, "{what}: title in {body}");
    assert_eq!(body["status"], status, "{what}: status in {body}");
    assert_eq!(body["error"], error, "{what}: error in {body}");
    assert!(
        error.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
        "{what}: error is snake_case"
    );
    assert!(
        body["detail"].as_str().is_some_and(|d| !d.is_empty()),
        "{what}: detail in {body}"
    );
    let id = answer
        .header_value("x-request-id")
        .unwrap_or_else(|| panic!("{what}: no X-Request-Id"));
    assert_eq!(
        body["request_id"], id,
        "{what}: request_id is the X-Request-Id"
    );
    body
}

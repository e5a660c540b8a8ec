//! A `CheckRequest` read into the HTTP request it asks about, as the traffic path would have
//! received it: the method, the path (the request target with its query, normalised later by
//! the layer as any path is), the host, the headers (`headers`, or `header_map` when Envoy
//! encodes them raw), and the body from `raw_body` (or `body`).
//!
//! Differences from what Envoy received: pseudo-headers (`:path`, `:method`, ...) are not
//! headers here (they are the fields above); the body's framing is its own (`Content-Length`
//! the length of the bytes sent); and a body Envoy cut short (`x-envoy-auth-partial-body:
//! true`, or bytes fewer than the request's `size` or `Content-Length` told), or a request
//! whose body Envoy did not send at all, is marked [`BodyCutShort`]: its body key parts are
//! missing, so `on_missing_key` decides, never a key read from part of it.

use std::net::IpAddr;

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::address::Address;
use envoy_types::pb::envoy::service::auth::v3::attribute_context::HttpRequest;
use envoy_types::pb::envoy::service::auth::v3::CheckRequest;
use http::header::{CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri};
use http_body_util::Full;

use crate::forward_auth::OriginalError;
use crate::layer::{announced_length, BodyCutShort};

/// `x-envoy-auth-partial-body`: Envoy's word that the body it sent is cut short.
pub static PARTIAL_BODY: HeaderName = HeaderName::from_static("x-envoy-auth-partial-body");

/// The HTTP request a `Check` asks about, and the client address Envoy saw.
pub struct Asked {
    /// The request, its body whole (or marked cut short).
    pub request: Request<Full<Bytes>>,
    /// `attributes.source.address` (unspecified when Envoy sent none).
    pub source: IpAddr,
}

/// The request `check` asks about; a `Check` without an HTTP request in its attributes, or
/// with a method or path that is none, cannot be read (the traffic path's 400).
pub fn asked(check: &CheckRequest) -> Result<Asked, OriginalError> {
    let attributes = check.attributes.as_ref();
    let http = attributes
        .and_then(|a| a.request.as_ref())
        .and_then(|r| r.http.as_ref())
        .ok_or_else(|| bad("the Check names no HTTP request (attributes.request.http)".into()))?;
    let source = attributes
        .and_then(|a| a.source.as_ref())
        .and_then(|p| p.address.as_ref())
        .and_then(|a| a.address.as_ref())
        .and_then(|a| match a {
            Address::SocketAddress(s) => s.address.parse::<IpAddr>().ok(),
            _ => None,
        })
        .unwrap_or(IpAddr::from([0, 0, 0, 0]));
    let method = Method::from_bytes(http.method.as_bytes())
        .map_err(|_| bad(format!("`{}` is not a method", http.method)))?;
    if !http.path.starts_with('/') {
        return Err(bad(format!("`{}` is not a request path", http.path)));
    }
    let uri: Uri = http
        .path
        .parse()
        .map_err(|_| bad(format!("`{}` is not a request path", http.path)))?;
    let mut headers = headers_of(http);
    if !http.host.is_empty() {
        let host = HeaderValue::from_str(&http.host)
            .map_err(|_| bad(format!("`{}` is not a host", http.host)))?;
        headers.insert(HOST, host);
    }
    let body = body_of(http);
    let cut_short = headers
        .get(&PARTIAL_BODY)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
        || (body.is_empty() && announces_body(&headers))
        || shorter_than_told(http, &headers, body.len());
    headers.remove(TRANSFER_ENCODING);
    headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    let mut request = Request::new(Full::new(body));
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.headers_mut() = headers;
    if cut_short {
        request.extensions_mut().insert(BodyCutShort);
    }
    Ok(Asked { request, source })
}

fn bad(why: String) -> OriginalError {
    OriginalError::BadOriginal(why)
}

/// The request's headers: `header_map` (raw values) when Envoy sent it, else `headers`; never a
/// pseudo-header, nor a name or value that is no header's.
fn headers_of(http: &HttpRequest) -> HeaderMap {
    // sized for all of them and the two set afterwards (`Host`, `Content-Length`)
    let sent = http.header_map.as_ref().map_or(0, |m| m.headers.len());
    let mut headers = HeaderMap::with_capacity(sent.max(http.headers.len()) + 2);
    let mut add = |name: &str, value: &[u8]| {
        if name.starts_with(':') {
            return;
        }
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value),
        ) {
            headers.append(n, v);
        }
    };
    match &http.header_map {
        Some(map) if !map.headers.is_empty() => {
            for h in &map.headers {
                let value = match h.raw_value.is_empty() {
                    true => h.value.as_bytes(),
                    false => h.raw_value.as_slice(),
                };
                add(&h.key, value);
            }
        }
        _ => {
            for (name, value) in &http.headers {
                for copy in merged_copies(value) {
                    add(name, copy.as_bytes());
                }
            }
        }
    }
    headers
}

/// The copies of a header that Envoy joined into one value of the `headers` map. It merges a
/// header sent more than once with a bare `,`, where a list's own separator is `, `: so every
/// `,` not followed by a space or a tab starts another copy, and a key part read from such a
/// value is ambiguous, as two lines are on the traffic path (a bot adding a second copy of a
/// keyed header must not make a new key of the pair, while the app reads the first copy).
/// A single value with such a comma reads as two copies too; `header_map` (Envoy's
/// `encode_raw_headers`) keeps copies apart and carries it whole.
fn merged_copies(value: &str) -> Vec<&str> {
    let mut copies = Vec::new();
    let mut start = 0;
    for (at, _) in value.match_indices(',') {
        if !matches!(value.as_bytes().get(at + 1), Some(b' ' | b'\t')) {
            copies.push(&value[start..at]);
            start = at + 1;
        }
    }
    copies.push(&value[start..]);
    copies
}

/// The body Envoy sent: `raw_body` (`pack_as_bytes`), else `body`.
fn body_of(http: &HttpRequest) -> Bytes {
    match http.raw_body.is_empty() {
        false => Bytes::copy_from_slice(&http.raw_body),
        true => Bytes::copy_from_slice(http.body.as_bytes()),
    }
}

/// Whether the original request announced a body (a `Content-Length` above 0, or chunked).
fn announces_body(headers: &HeaderMap) -> bool {
    announced_length(headers).is_some_and(|n| n > 0) || headers.contains_key(TRANSFER_ENCODING)
}

/// Whether the body sent is shorter than the request's size (`size`, -1 when unknown) or its
/// `Content-Length` says: cut short, though not marked so (Envoy always marks it; another
/// caller of `Check` may not).
fn shorter_than_told(http: &HttpRequest, headers: &HeaderMap, sent: usize) -> bool {
    let sent = sent as u64;
    u64::try_from(http.size).is_ok_and(|size| size > sent)
        || announced_length(headers).is_some_and(|n| n > sent)
}

#[cfg(test)]
mod tests {
    use super::merged_copies;

    #[test]
    fn copies_envoy_joined_are_read_apart_and_a_lists_own_commas_are_not() {
        assert_eq!(merged_copies("victim"), ["victim"]);
        assert_eq!(merged_copies("victim,junk"), ["victim", "junk"]);
        assert_eq!(merged_copies("victim,"), ["victim", ""]);
        assert_eq!(
            merged_copies("(KHTML, like Gecko)"),
            ["(KHTML, like Gecko)"]
        );
        assert_eq!(merged_copies("a, b,c"), ["a, b", "c"]);
        assert_eq!(merged_copies(""), [""]);
    }
}

//! What a client's `Connection` header may name. RFC 9110 lets it name any header, which a proxy
//! then removes before forwarding; a gateway that counted the request by one of those headers
//! would forward a different request from the one it counted (a body counted as JSON arriving
//! with no `Content-Type`, a key header gone). So a `Connection` naming a header the request's
//! meaning rests on (`Content-Type`, `Content-Length`, `Transfer-Encoding`, `Content-Encoding`,
//! `Host`, or any header a key part of the route reads) is refused, before anything is counted.
//! The headers the gateway sets itself are never removed (`proxy::headers`), so naming them
//! changes nothing and is no reason to refuse.

use http::header::{
    HeaderMap, HeaderName, CONNECTION, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, HOST,
    TRANSFER_ENCODING,
};

/// The headers every request's meaning rests on.
const ALWAYS: [HeaderName; 5] = [
    CONTENT_TYPE,
    CONTENT_LENGTH,
    TRANSFER_ENCODING,
    CONTENT_ENCODING,
    HOST,
];

/// The first header `Connection` names that the request's meaning rests on: one of [`ALWAYS`]
/// or of `guarded` (the headers the route's keys read). No allocation: the common
/// `keep-alive` / `close` cost one comparison per listed name.
pub fn removes_meaning<'h>(headers: &'h HeaderMap, guarded: &[HeaderName]) -> Option<&'h str> {
    headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .find(|name| {
            let is = |h: &HeaderName| name.eq_ignore_ascii_case(h.as_str());
            ALWAYS.iter().any(is) || guarded.iter().any(is)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn named(connection: &str, guarded: &[HeaderName]) -> Option<String> {
        let mut h = HeaderMap::new();
        h.append(CONNECTION, HeaderValue::from_str(connection).unwrap());
        removes_meaning(&h, guarded).map(str::to_string)
    }

    #[test]
    fn names_the_meaning_rests_on_are_found() {
        let key = [HeaderName::from_static("x-api-key")];
        for (connection, found) in [
            ("close", None),
            ("keep-alive, x-secret", None),
            ("close, Content-Type", Some("Content-Type")),
            ("close,content-length", Some("content-length")),
            ("Transfer-Encoding", Some("Transfer-Encoding")),
            ("keep-alive, CONTENT-ENCODING", Some("CONTENT-ENCODING")),
            ("host", Some("host")),
            ("close, X-Api-Key", Some("X-Api-Key")),
        ] {
            assert_eq!(named(connection, &key).as_deref(), found, "{connection}");
        }
        assert_eq!(named("x-api-key", &[]), None);
    }
}

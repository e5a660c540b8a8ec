//! HTTP/2 cookies, joined: a client may split `cookie` into one field per cookie (RFC 9113
//! 8.2.3, as browsers do to compress them), and they must be one `; `-joined field before the
//! request goes anywhere that is not HTTP/2 (an HTTP/1.1 upstream, an app's framework). Joined
//! where the request is admitted, so a `header:cookie` key and the forwarded request see one
//! value, as an HTTP/1.1 client would send it.

use http::header::COOKIE;
use http::{HeaderMap, HeaderValue, Version};

/// Joins the `cookie` fields of an HTTP/2 request into one, in order, with `; ` (empty fields
/// add nothing: padding makes no other value).
pub fn join_http2(version: Version, headers: &mut HeaderMap) {
    if version != Version::HTTP_2 {
        return;
    }
    let mut fields = headers.get_all(COOKIE).iter();
    let (Some(_), Some(_)) = (fields.next(), fields.next()) else {
        return;
    };
    let mut joined = Vec::new();
    for field in headers.get_all(COOKIE).iter().filter(|f| !f.is_empty()) {
        if !joined.is_empty() {
            joined.extend_from_slice(b"; ");
        }
        joined.extend_from_slice(field.as_bytes());
    }
    if joined.is_empty() {
        // empty fields only: no cookie
        headers.remove(COOKIE);
    } else if let Ok(value) = HeaderValue::from_bytes(&joined) {
        // joined from valid field values with `; `: a valid value too
        headers.insert(COOKIE, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_http2_cookie_fields_are_no_cookie() {
        let mut headers = HeaderMap::new();
        headers.append(COOKIE, HeaderValue::from_static(""));
        headers.append(COOKIE, HeaderValue::from_static(""));
        join_http2(Version::HTTP_2, &mut headers);
        assert!(headers.get(COOKIE).is_none());
    }

    #[test]
    fn http2_cookie_fields_become_one() {
        let mut headers = HeaderMap::new();
        headers.append(COOKIE, HeaderValue::from_static("a=1"));
        headers.append(COOKIE, HeaderValue::from_static("b=2"));
        headers.append(COOKIE, HeaderValue::from_static(""));
        let mut h1 = headers.clone();
        join_http2(Version::HTTP_2, &mut headers);
        let fields: Vec<_> = headers.get_all(COOKIE).iter().collect();
        assert_eq!(fields, ["a=1; b=2"], "an empty field adds nothing");
        join_http2(Version::HTTP_11, &mut h1);
        assert_eq!(
            h1.get_all(COOKIE).iter().count(),
            3,
            "HTTP/1.1 left as sent"
        );
    }
}

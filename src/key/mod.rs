//! Rate-limit keys: which parts of a request identify "who" (`ip`, `header:NAME`,
//! `query:NAME`, `jwt:CLAIM`, `route`, `method`, `path`), how they are joined into the derived
//! key (`203.0.113.7|POST`), and how that key becomes a short, injection-proof Redis key.

mod client_ip;
mod jwt;
mod storage;

use std::fmt;
use std::net::IpAddr;

use http::{HeaderMap, HeaderName, Method};

pub use client_ip::{client_ip, is_trusted, X_FORWARDED_FOR};
pub use jwt::JwtVerifier;
pub use storage::{block_key, decision_base, limit_key, storage_material, MAX_RAW_KEY_LEN};

use crate::config::OnMissingKey;

/// One part of a route's key, in config order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPart {
    /// The client IP (see [`client_ip`]).
    Ip,
    /// A request header's value.
    Header(HeaderName),
    /// A query parameter's (decoded) value.
    Query(String),
    /// A claim of a verified JWT bearer token.
    Jwt(String),
    /// The route's name: one limit shared by every client.
    Route,
    /// The request method.
    Method,
    /// The request path.
    Path,
}

impl KeyPart {
    /// Parses a config key part such as `header:X-Api-Key`.
    pub fn parse(text: &str) -> Result<KeyPart, String> {
        let (kind, arg) = match text.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (text, None),
        };
        match (kind, arg) {
            ("ip", None) => Ok(KeyPart::Ip),
            ("route", None) => Ok(KeyPart::Route),
            ("method", None) => Ok(KeyPart::Method),
            ("path", None) => Ok(KeyPart::Path),
            ("header", Some(name)) => HeaderName::from_bytes(name.trim().as_bytes())
                .map(KeyPart::Header)
                .map_err(|_| format!("`{text}`: `{name}` is not a valid header name")),
            ("query", Some(name)) if !name.is_empty() => Ok(KeyPart::Query(name.to_string())),
            ("jwt", Some(claim)) if !claim.is_empty() => Ok(KeyPart::Jwt(claim.to_string())),
            _ => Err(format!(
                "unknown key part `{text}`, expected \"ip\", \"header:NAME\", \"query:NAME\", \"jwt:CLAIM\", \"route\", \"method\" or \"path\""
            )),
        }
    }
}

impl fmt::Display for KeyPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyPart::Ip => f.write_str("ip"),
            KeyPart::Header(h) => write!(f, "header:{h}"),
            KeyPart::Query(q) => write!(f, "query:{q}"),
            KeyPart::Jwt(c) => write!(f, "jwt:{c}"),
            KeyPart::Route => f.write_str("route"),
            KeyPart::Method => f.write_str("method"),
            KeyPart::Path => f.write_str("path"),
        }
    }
}

/// What a key is derived from: the parts of one request.
pub struct KeySource<'a> {
    /// The matched route's name.
    pub route: &'a str,
    /// The request method.
    pub method: &'a Method,
    /// The request path (no query).
    pub path: &'a str,
    /// The raw query string, if any.
    pub query: Option<&'a str>,
    /// The request headers.
    pub headers: &'a HeaderMap,
    /// The client IP after trusted-proxy resolution.
    pub client_ip: IpAddr,
    /// The verifier for `jwt:` parts, when `[jwt]` is configured.
    pub jwt: Option<&'a JwtVerifier>,
}

/// A key part the request does not carry (and the route rejects such requests).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the request has no {part} (needed for the rate-limit key)")]
pub struct MissingKeyPart {
    /// The part, as written in the config.
    pub part: String,
}

/// Joins the key parts with `|` in config order, e.g. `203.0.113.7|POST`.
pub fn derive_key(
    parts: &[KeyPart],
    on_missing: OnMissingKey,
    src: &KeySource<'_>,
) -> Result<String, MissingKeyPart> {
    let mut key = String::with_capacity(48);
    let mut claims = None;
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            key.push('|');
        }
        let value = match part {
            KeyPart::Ip => Some(src.client_ip.to_string()),
            KeyPart::Header(name) => src
                .headers
                .get(name)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .filter(|v| !v.is_empty()),
            KeyPart::Query(name) => query_value(src.query, name),
            KeyPart::Jwt(claim) => {
                let claims = claims
                    .get_or_insert_with(|| src.jwt.and_then(|v| v.verified_claims(src.headers)));
                claims.as_ref().and_then(|c| jwt::claim_value(c, claim))
            }
            KeyPart::Route => Some(src.route.to_string()),
            KeyPart::Method => Some(src.method.as_str().to_string()),
            KeyPart::Path => Some(src.path.to_string()),
        };
        match (value, on_missing) {
            (Some(v), _) => key.push_str(&v),
            (None, OnMissingKey::Ip) => key.push_str(&src.client_ip.to_string()),
            (None, OnMissingKey::Reject) => {
                return Err(MissingKeyPart {
                    part: part.to_string(),
                })
            }
        }
    }
    Ok(key)
}

/// The first non-empty value of query parameter `name`, percent-decoded.
fn query_value(query: Option<&str>, name: &str) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(k, v)| k == name && !v.is_empty())
        .map(|(_, v)| v.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source<'a>(headers: &'a HeaderMap, query: Option<&'a str>) -> KeySource<'a> {
        KeySource {
            route: "otp",
            method: &Method::POST,
            path: "/api/otp/send",
            query,
            headers,
            client_ip: "203.0.113.7".parse().unwrap(),
            jwt: None,
        }
    }

    #[test]
    fn parts_join_in_config_order() {
        let h = HeaderMap::new();
        let parts = [KeyPart::Ip, KeyPart::Method, KeyPart::Route, KeyPart::Path];
        let key = derive_key(&parts, OnMissingKey::Reject, &source(&h, None)).unwrap();
        assert_eq!(key, "203.0.113.7|POST|otp|/api/otp/send");
    }

    #[test]
    fn missing_parts_reject_or_fall_back_to_ip() {
        let h = HeaderMap::new();
        let parts = [
            KeyPart::Header(HeaderName::from_static("x-api-key")),
            KeyPart::Method,
        ];
        let err = derive_key(&parts, OnMissingKey::Reject, &source(&h, None)).unwrap_err();
        assert_eq!(err.part, "header:x-api-key");
        let key = derive_key(&parts, OnMissingKey::Ip, &source(&h, None)).unwrap();
        assert_eq!(key, "203.0.113.7|POST");
    }

    #[test]
    fn query_values_are_decoded() {
        let h = HeaderMap::new();
        let parts = [KeyPart::Query("user".into())];
        let key = derive_key(
            &parts,
            OnMissingKey::Reject,
            &source(&h, Some("a=1&user=j%C3%B6rg+x")),
        )
        .unwrap();
        assert_eq!(key, "jörg x");
    }

    #[test]
    fn key_parts_parse_and_print_back() {
        for text in [
            "ip",
            "header:x-api-key",
            "query:user",
            "jwt:sub",
            "route",
            "method",
            "path",
        ] {
            assert_eq!(KeyPart::parse(text).unwrap().to_string(), text);
        }
        assert!(KeyPart::parse("cookie:x").is_err());
        assert!(KeyPart::parse("header:bad header").is_err());
    }
}

//! Rate-limit keys: which parts of a request identify "who" (`ip`, `header:NAME`,
//! `query:NAME`, `jwt:CLAIM`, `route`, `method`, `path`), how they are joined into the derived
//! key (`203.0.113.7|POST`), and how that key becomes a short, injection-proof Redis key.

mod client_ip;
mod jwt;
mod storage;

use std::net::IpAddr;

use http::{HeaderMap, Method};

pub use client_ip::{client_ip, is_trusted, X_FORWARDED_FOR};
pub use jwt::JwtVerifier;
pub use storage::{
    block_key, counter_key, decision_base, logged_key, sorted_set_key, storage_material,
    MAX_RAW_KEY_LEN,
};

use crate::config::{KeyPart, OnMissingKey};

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
    /// IPv6 clients are keyed by their network of this prefix length.
    pub ipv6_prefix: u8,
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
            KeyPart::Ip => Some(ip_key(src.client_ip, src.ipv6_prefix)),
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
            (None, OnMissingKey::Ip) => key.push_str(&ip_key(src.client_ip, src.ipv6_prefix)),
            (None, OnMissingKey::Reject) => {
                return Err(MissingKeyPart {
                    part: part.to_string(),
                })
            }
        }
    }
    Ok(key)
}

/// The `ip` key part: an IPv4 address as it is; an IPv6 address as its network of `prefix` bits
/// (`2001:db8:1:2::/64`), so one host cannot rotate addresses inside its allocation. A /128
/// prefix keys each address on its own, and prints it bare.
pub fn ip_key(ip: IpAddr, prefix: u8) -> String {
    match ip.to_canonical() {
        IpAddr::V6(v6) if prefix < 128 => {
            let net = ipnet::Ipv6Net::new(v6, prefix).map(|n| n.trunc());
            net.map_or_else(|_| v6.to_string(), |n| n.to_string())
        }
        other => other.to_string(),
    }
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
    use http::HeaderName;

    fn source<'a>(headers: &'a HeaderMap, query: Option<&'a str>) -> KeySource<'a> {
        KeySource {
            route: "otp",
            method: &Method::POST,
            path: "/api/otp/send",
            query,
            headers,
            client_ip: "203.0.113.7".parse().unwrap(),
            ipv6_prefix: 64,
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
    fn ipv6_clients_group_by_prefix() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        assert_eq!(ip_key(a, 64), "2001:db8:1:2::/64");
        assert_eq!(ip_key(a, 64), ip_key(b, 64));
        assert_ne!(ip_key(a, 128), ip_key(b, 128));
        assert_eq!(ip_key(a, 128), "2001:db8:1:2:aaaa::1");
        assert_eq!(ip_key("203.0.113.7".parse().unwrap(), 64), "203.0.113.7");
        assert_eq!(
            ip_key("::ffff:203.0.113.7".parse().unwrap(), 64),
            "203.0.113.7"
        );
    }
}

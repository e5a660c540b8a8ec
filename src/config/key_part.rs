//! `routes[].key`: the parts of a request that identify "who" a limit counts, as the config
//! names them (`ip`, `header:NAME`, `query:NAME`, `jwt:CLAIM`, `route`, `method`, `path`).
//! Extracting them from a request is `crate::key`'s job.

use std::fmt;

use http::HeaderName;

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

#[cfg(test)]
mod tests {
    use super::*;

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

//! Reading one key part's raw value from a request: the bytes as the request carries them,
//! before any option or escaping. `None` is a missing part.

use super::{body, ip_key, jwt, KeySource};
use crate::config::{KeyPart, PathCase};

/// A body member or form field that appears twice on the part's path.
#[derive(Debug)]
pub struct Ambiguous;

/// What parts of one key share: the verified token's claims, decoded once.
#[derive(Default)]
pub struct Cache {
    claims: Option<Option<serde_json::Map<String, serde_json::Value>>>,
}

/// The raw value of `part` in the request `src`.
pub fn read(
    part: &KeyPart,
    src: &KeySource<'_>,
    cache: &mut Cache,
) -> Result<Option<Vec<u8>>, Ambiguous> {
    Ok(match part {
        KeyPart::Ip => Some(ip_key(src.client_ip, src.ipv6_prefix).into_bytes()),
        KeyPart::Header(name) => src
            .headers
            .get(name)
            .map(|v| v.as_bytes().to_vec())
            .filter(|v| !v.is_empty()),
        KeyPart::Query(name) => src
            .query
            .and_then(|q| body::form_values(q.as_bytes(), name).find(|v| !v.is_empty())),
        KeyPart::Jwt(claim) => {
            let claims = cache
                .claims
                .get_or_insert_with(|| src.jwt.and_then(|v| v.verified_claims(src.headers)));
            claims
                .as_ref()
                .and_then(|c| jwt::claim_value(c, claim))
                .map(String::into_bytes)
        }
        KeyPart::Route => Some(src.route.as_bytes().to_vec()),
        KeyPart::Method => Some(method_value(src.method.as_str()).into_bytes()),
        KeyPart::Path => Some(path_value(src.path, src.path_case).into_bytes()),
        KeyPart::Json(path) => match body::kind(src.headers) {
            Some(body::BodyKind::Json) => src
                .body
                .map(|b| body::json_value(b, path))
                .transpose()?
                .flatten(),
            _ => None,
        },
        KeyPart::Form(name) => match body::kind(src.headers) {
            Some(body::BodyKind::Form) => match src.body {
                Some(b) => {
                    let mut values = body::form_values(b, name);
                    let first = values.next();
                    if values.next().is_some() {
                        return Err(Ambiguous);
                    }
                    first.filter(|v| !v.is_empty())
                }
                None => None,
            },
            _ => None,
        },
    })
}

/// The method as the `method` part reads it: upper case, and `GET` for `HEAD` (a route that
/// takes `GET` counts both alike).
/// The value a `method` part counts: the method in upper case, `HEAD` as `GET` (a `GET` route
/// matches and counts both).
pub fn method_value(method: &str) -> String {
    let name = method.to_ascii_uppercase();
    if name == "HEAD" {
        "GET".to_string()
    } else {
        name
    }
}

/// The value a `path` part counts: the (normalised) path, in lower case unless
/// `server.path_case` is sensitive.
pub fn path_value(path: &str, case: PathCase) -> String {
    match case {
        PathCase::Insensitive => path.to_ascii_lowercase(),
        PathCase::Sensitive => path.to_string(),
    }
}

//! Reading one key part's raw value from a request: the bytes as the request carries them,
//! before any option or escaping. `None` is a missing part. A body part is ambiguous when the
//! query names it too (`?phone=V` beside a body's `phone`): many frameworks merge the query
//! into the parameters they read, some letting it win.

use std::borrow::Cow;

use super::{body, form, ip_key, jwt, KeySource};
use crate::config::{KeyPart, PathCase};

/// Why a part the request carries gives no value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadError {
    /// Named twice, or in a spelling some framework folds into its name, or in the query too.
    Ambiguous,
    /// Present, but not a value: what it must be ("a number within the range of a double").
    Invalid(&'static str),
}

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
) -> Result<Option<Vec<u8>>, ReadError> {
    Ok(match part {
        KeyPart::Ip => Some(ip_key(src.client_ip, src.ipv6_prefix).into_bytes()),
        KeyPart::Header(name) => src
            .headers
            .get(name)
            .map(|v| v.as_bytes().to_vec())
            .filter(|v| !v.is_empty()),
        KeyPart::Query(name) => src
            .query
            .and_then(|q| form::values(q.as_bytes(), name).find(|v| !v.is_empty())),
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
        KeyPart::Json(path) => {
            refuse_query_copy(src, &path[0])?;
            match (body::kind(src.headers), src.body) {
                (Some(body::BodyKind::Json), Some(b)) => body::json_value(b, path)?,
                _ => None,
            }
        }
        KeyPart::Form(name) => {
            refuse_query_copy(src, name)?;
            match (body::kind(src.headers), src.body) {
                (Some(body::BodyKind::Form), Some(b)) => form::field(b, name)?,
                _ => None,
            }
        }
    })
}

/// A body part's name (a `form:` field, a `json:` path's top-level member) named in the query
/// too, in any spelling, is ambiguous, whatever the body holds.
fn refuse_query_copy(src: &KeySource<'_>, name: &str) -> Result<(), ReadError> {
    match src.query {
        Some(q) if form::names(q.as_bytes(), name) => Err(ReadError::Ambiguous),
        _ => Ok(()),
    }
}

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

/// The value a `path` part counts: the (normalised) path as routing reads it (without `;`
/// parameters), without a trailing `/` (an exact route takes both, as most frameworks serve
/// both alike), in lower case unless `server.path_case` is sensitive. (A request whose path
/// has no such form was refused before its route; a value given to `slidegate key` is then
/// taken as it is.)
pub fn path_value(path: &str, case: PathCase) -> String {
    let routed = crate::path::without_parameters(path).unwrap_or(Cow::Borrowed(path));
    let routed = match routed.strip_suffix('/') {
        Some(cut) if !cut.is_empty() => Cow::Borrowed(cut),
        _ => routed,
    };
    match case {
        PathCase::Insensitive => routed.to_ascii_lowercase(),
        PathCase::Sensitive => routed.into_owned(),
    }
}

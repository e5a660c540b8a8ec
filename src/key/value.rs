//! Reading one key part's raw value from a request: the bytes as the request carries them,
//! before any option or escaping. `None` is a missing part. A part the request names twice, or
//! in a spelling some framework reads as its name, is ambiguous (header lines, query
//! parameters, body fields alike); so is a body part the query names too (`?phone=V` beside a
//! body's `phone`): many frameworks merge the query into the parameters they read, some letting
//! it win; and a cookie named like a form or query part that says otherwise (PHP's `$_REQUEST`).

use std::borrow::Cow;

use http::{HeaderMap, HeaderName};

use super::client_ip::ip_key;
use super::read_error::ReadError;
use super::source::KeySource;
use super::{body, body_kind, form, jwt};
use crate::config::{KeyPart, PathCase};

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
        KeyPart::Header(name) if name == http::header::HOST => host(src)?,
        KeyPart::Header(name) => header(src.headers, name)?,
        // read as strictly as a form body: a parameter named twice or in a folded spelling
        // (`?api_key=A&api_key=B`, `?API_KEY=`) is one frameworks read apart (first, last, all)
        KeyPart::Query(name) => {
            let value = match src.query {
                Some(q) => form::field(q.as_bytes(), name)?,
                None => None,
            };
            refuse_cookie_copy(src.headers, name, value.as_deref())?;
            value
        }
        KeyPart::Jwt(claim) => {
            // two tokens are ambiguous as any header sent twice: the upstream may act on the
            // other one (HAProxy's `req.hdr()` takes the last line)
            header(src.headers, &http::header::AUTHORIZATION)?;
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
            match (body_kind::kind(src.headers)?, src.body) {
                (Some(body_kind::BodyKind::Json), Some(b)) => body::json_value(b, path)?,
                _ => None,
            }
        }
        KeyPart::Form(name) => {
            refuse_query_copy(src, name)?;
            let value = match (body_kind::kind(src.headers)?, src.body) {
                (Some(body_kind::BodyKind::Form), Some(b)) => form::field(b, name)?,
                _ => None,
            };
            refuse_cookie_copy(src.headers, name, value.as_deref())?;
            value
        }
    })
}

/// A header's value. Sent on two lines it is ambiguous (frameworks take the first, the last,
/// or both joined); so is the same name with `_` for `-` beside it, since CGI, and PHP behind
/// it, read `X_Api_Key` as `X-Api-Key` (both are `HTTP_X_API_KEY`).
fn header(headers: &HeaderMap, name: &HeaderName) -> Result<Option<Vec<u8>>, ReadError> {
    let mut lines = headers.get_all(name).iter();
    let value = lines.next();
    let cgi_copy = |other: &HeaderName| {
        other != name
            && other.as_str().len() == name.as_str().len()
            && (other.as_str().bytes().zip(name.as_str().bytes()))
                .all(|(a, b)| a == b || (a == b'_' && b == b'-') || (a == b'-' && b == b'_'))
    };
    if lines.next().is_some() || headers.keys().any(cgi_copy) {
        return Err(ReadError::Ambiguous);
    }
    Ok(value
        .map(|v| v.as_bytes().to_vec())
        .filter(|v| !v.is_empty()))
}

/// The host a request is for, in one spelling ([`crate::host::canonical`]: `TENANT-A:80` is
/// `tenant-a`): its target's authority when it has one (HTTP/2's `:authority`, an HTTP/1.1
/// absolute-form target, which RFC 9112 3.2.2 puts before `Host`, and what the gateway
/// forwards), else `Host`. A `Host` that names another host beside an authority is ambiguous
/// (RFC 9113 8.3.1: malformed): the app may read either.
fn host(src: &KeySource<'_>) -> Result<Option<Vec<u8>>, ReadError> {
    let spelled = |bytes: &[u8]| match std::str::from_utf8(bytes) {
        Ok(text) => crate::host::canonical(text).into_bytes(),
        Err(_) => bytes.to_vec(),
    };
    let sent = header(src.headers, &http::header::HOST)?.map(|h| spelled(&h));
    let authority = src.authority.map(|a| spelled(a.as_bytes()));
    match (authority, sent) {
        (Some(authority), Some(host)) if host != authority => Err(ReadError::Ambiguous),
        (Some(authority), _) => Ok(Some(authority)),
        (None, sent) => Ok(sent),
    }
}

/// A body part's name (a `form:` field, a `json:` path's top-level member) named in the query
/// too, in any spelling, is ambiguous, whatever the body holds.
fn refuse_query_copy(src: &KeySource<'_>, name: &str) -> Result<(), ReadError> {
    match src.query {
        Some(q) if form::names(q.as_bytes(), name) => Err(ReadError::Ambiguous),
        _ => Ok(()),
    }
}

/// A cookie PHP reads as a `form:` or `query:` part's name ([`form::cookie_values`]) that holds
/// another value than the part, or stands where the part is missing, is ambiguous: PHP's `$_REQUEST` merges
/// cookies over the query and the form body wherever no `php.ini` sets `request_order` (the
/// official Docker image ships none), so the upstream would act on the cookie's value.
fn refuse_cookie_copy(
    headers: &HeaderMap,
    name: &str,
    value: Option<&[u8]>,
) -> Result<(), ReadError> {
    let mut cookies = headers
        .get_all(http::header::COOKIE)
        .iter()
        .flat_map(|line| form::cookie_values(line.as_bytes(), name));
    match cookies.any(|cookie| Some(&*cookie) != value) {
        true => Err(ReadError::Ambiguous),
        false => Ok(()),
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

/// The value a `path` part counts: the (normalised) path in its routing form (without `;`
/// parameters, one spelling of each escape: [`crate::path::routing_form`]), without a trailing
/// `/` (an exact route takes both, as most frameworks serve both alike), in lower case unless
/// `server.path_case` is sensitive. (A request whose path has no such form was refused before
/// its route; a value given to `slidegate key` is then taken as it is.)
pub fn path_value(path: &str, case: PathCase) -> String {
    let routed = crate::path::routing_form(path).unwrap_or(Cow::Borrowed(path));
    let routed = match routed.strip_suffix('/') {
        Some(cut) if !cut.is_empty() => Cow::Borrowed(cut),
        _ => routed,
    };
    match case {
        PathCase::Insensitive => routed.to_ascii_lowercase(),
        PathCase::Sensitive => routed.into_owned(),
    }
}

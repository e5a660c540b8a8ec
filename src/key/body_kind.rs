//! Which kind of body a request says it carries ([`kind`]): the `Content-Type` a `json:` or
//! `form:` key part reads the body by, or an ambiguous one no key may be read from.

use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue};

use super::read_error::ReadError;

/// What kind of body a request says it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// `application/json` or `application/*+json`.
    Json,
    /// `application/x-www-form-urlencoded`.
    Form,
}

/// The kind of body `Content-Type` names, if it is one key parts read. Sent on two lines that
/// differ, it is ambiguous: frameworks take the first line or the last, and a body that parses
/// both as JSON and as a form would be counted as one and acted on as the other.
pub fn kind(headers: &HeaderMap) -> Result<Option<BodyKind>, ReadError> {
    let mut lines = headers.get_all(CONTENT_TYPE).iter();
    let Some(first) = lines.next() else {
        return Ok(None);
    };
    if lines.any(|other| other != first) {
        return Err(ReadError::Ambiguous);
    }
    kind_of(first)
}

/// The kind of body one `Content-Type` value names. A body declared in a charset other than
/// UTF-8 (or its subset US-ASCII) is none of them: frameworks decode it in that charset
/// (`b%E9b` is `béb` in ISO-8859-1), so the gateway, which reads UTF-8, would count another
/// value than the one the upstream acts on.
///
/// A value frameworks read as different types is ambiguous, for a polyglot body parses as both:
/// a media type that is not `type/subtype` in token characters (PHP and Rack cut
/// `application/x-www-form-urlencoded,x/y+json` at the comma and read a form, where the
/// subtype's end says JSON), and a value that mentions `/json` or `+json` anywhere without
/// naming a JSON type (Laravel's `isJson()` looks for those words in the whole header, so
/// `application/x-www-form-urlencoded; x=/json` is JSON to it).
fn kind_of(value: &HeaderValue) -> Result<Option<BodyKind>, ReadError> {
    let value = value.to_str().map_err(|_| ReadError::Ambiguous)?;
    let mut parts = value.split(';');
    let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
    let (kind, subtype) = media.split_once('/').unwrap_or((&media, ""));
    let named = match (kind, subtype) {
        ("application", "json") => Some(BodyKind::Json),
        ("application", s) if s.ends_with("+json") => Some(BodyKind::Json),
        ("application", "x-www-form-urlencoded") => Some(BodyKind::Form),
        _ => None,
    };
    let well_formed = is_token(kind) && is_token(subtype);
    let says_json = value
        .as_bytes()
        .windows(5)
        .any(|w| w[1..].eq_ignore_ascii_case(b"json") && (w[0] == b'/' || w[0] == b'+'));
    if !well_formed && (named.is_some() || says_json || media.contains("form"))
        || (says_json && named != Some(BodyKind::Json))
    {
        return Err(ReadError::Ambiguous);
    }
    if !parts.all(is_utf8_or_no_charset) {
        return Ok(None);
    }
    Ok(named)
}

/// Whether `text` is an RFC 9110 token: one or more of its visible characters.
fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Whether a `Content-Type` parameter is no `charset`, or one that reads as UTF-8.
fn is_utf8_or_no_charset(parameter: &str) -> bool {
    let Some((name, value)) = parameter.split_once('=') else {
        return true;
    };
    if !name.trim().eq_ignore_ascii_case("charset") {
        return true;
    }
    let charset = value.trim().trim_matches('"');
    ["utf-8", "utf8", "us-ascii"]
        .iter()
        .any(|c| charset.eq_ignore_ascii_case(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(value: &'static str) -> Result<Option<BodyKind>, ReadError> {
        kind_of(&HeaderValue::from_static(value))
    }

    #[test]
    fn a_body_in_a_charset_other_than_utf8_is_no_kind_key_parts_read() {
        let form = Ok(Some(BodyKind::Form));
        assert_eq!(kind("application/x-www-form-urlencoded"), form);
        assert_eq!(
            kind("application/x-www-form-urlencoded; charset=UTF-8"),
            form
        );
        assert_eq!(
            kind("application/x-www-form-urlencoded;charset=\"utf-8\""),
            form
        );
        assert_eq!(
            kind("application/x-www-form-urlencoded; charset=us-ascii"),
            form
        );
        assert_eq!(
            kind("application/x-www-form-urlencoded; charset=iso-8859-1"),
            Ok(None)
        );
        assert_eq!(kind("application/json; charset=utf-16"), Ok(None));
        assert_eq!(kind("application/json; v=1"), Ok(Some(BodyKind::Json)));
        assert_eq!(
            kind("Application/Problem+JSON ;charset=utf-8"),
            Ok(Some(BodyKind::Json))
        );
        assert_eq!(kind("text/plain"), Ok(None));
        assert_eq!(kind("multipart/form-data; boundary=x"), Ok(None));
    }

    #[test]
    fn a_type_frameworks_read_otherwise_is_ambiguous() {
        for polyglot in [
            // PHP and Rack cut the type at a comma or a space: a form to them
            "application/x-www-form-urlencoded,x/y+json",
            "application/x-www-form-urlencoded x/y+json",
            "application/x-www-form-urlencoded, application/json",
            // Laravel's isJson() finds `/json` or `+json` anywhere: JSON to it
            "application/x-www-form-urlencoded; x=/json",
            "application/x-www-form-urlencoded; profile=\"a+json\"",
            "text/plain; x=/JSON",
            // no type/subtype every parser agrees on
            "application/json/x",
            "application /json",
            "application/json\tx",
        ] {
            assert_eq!(kind(polyglot), Err(ReadError::Ambiguous), "{polyglot}");
        }
    }
}

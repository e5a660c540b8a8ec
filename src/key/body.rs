//! Key parts read from a JSON body (`json:PATH`), and which kind of body a request says it
//! carries (form bodies are read in `form.rs`). A key is the value the upstream will act on,
//! never its spelling: a string gives its decoded text (escapes resolved), a plain integer below
//! 2^53 its digits (`6281234567890` is the string `"6281234567890"`), `true`/`false` their
//! names. Any other number (`6200.0`, `62e2`, `-0`, `9007199254740993`) has no text every parser
//! agrees on (JavaScript writes `1e21` as `1e+21`, Python keeps `6200.0`, a double rounds
//! `9007199254740995` to `...996`): it is unclear, a 400, never a key the upstream may read as
//! another account. `null`, an object, an array, a missing member or a body that does not parse
//! (nested past serde_json's depth limit included) give nothing.
//!
//! A member named twice on the path, or named in a spelling some framework folds into the wanted
//! name (`PHONE`, `"phone "`, `names.rs`), on any object of the path, is ambiguous: the gateway
//! cannot know which copy the upstream reads.
//!
//! Differences from parsing into a `serde_json::Value`: a map keeps the last of two equal
//! member names, which would hide the duplicate; here the walk follows the path itself, checks
//! each object on it for copies, and skips everything else without building it.

use std::fmt;

use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::names::{compare, NameMatch};
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
    let says_json = {
        let lower = value.to_ascii_lowercase();
        lower.contains("/json") || lower.contains("+json")
    };
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

/// What the walk found at the end of the path.
enum Found {
    Value(Vec<u8>),
    Nothing,
    Ambiguous,
    Unclear(&'static str),
}

/// The value at `path` of the JSON `body`.
pub fn json_value(body: &[u8], path: &[String]) -> Result<Option<Vec<u8>>, ReadError> {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    let mut de = serde_json::Deserializer::from_slice(body);
    let found = match (PathSeed { path }).deserialize(&mut de) {
        Ok(found) if de.end().is_ok() => found,
        _ => return Ok(None),
    };
    match found {
        Found::Value(v) => Ok(Some(v)),
        Found::Nothing => Ok(None),
        Found::Ambiguous => Err(ReadError::Ambiguous),
        Found::Unclear(what) => Err(ReadError::Unclear(what)),
    }
}

struct PathSeed<'p> {
    path: &'p [String],
}

impl<'de> DeserializeSeed<'de> for PathSeed<'_> {
    type Value = Found;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Found, D::Error> {
        if self.path.is_empty() {
            let raw = <Box<RawValue>>::deserialize(d)?;
            return Ok(scalar(raw.get()));
        }
        d.deserialize_any(PathVisitor { path: self.path })
    }
}

/// The key material of a JSON value: strings decoded, plain integers by their digits, booleans
/// by name.
fn scalar(raw: &str) -> Found {
    match raw.as_bytes().first() {
        Some(b'"') => match serde_json::from_str::<String>(raw) {
            Ok(s) if !s.is_empty() => Found::Value(s.into_bytes()),
            _ => Found::Nothing,
        },
        Some(b't' | b'f') => Found::Value(raw.as_bytes().to_vec()),
        Some(b'-' | b'0'..=b'9') => match is_plain_integer(raw) {
            true => Found::Value(raw.as_bytes().to_vec()),
            false => Found::Unclear(NOT_PLAIN_INTEGER),
        },
        _ => Found::Nothing,
    }
}

/// What a number that is not keyed is not (the 400's detail).
pub const NOT_PLAIN_INTEGER: &str =
    "a number parsers read alike: only a plain integer below 2^53 (no fraction, no exponent, not -0) is read; send other values as strings";

/// Whether a JSON number (as the parser accepted it) is written `-?[1-9][0-9]*` or `0` and its
/// magnitude is below 2^53: the numbers every parser reads as the same integer and writes back
/// as the same digits (a double holds each exactly).
pub fn is_plain_integer(raw: &str) -> bool {
    let digits = raw.strip_prefix('-').unwrap_or(raw);
    let plain = match digits.as_bytes() {
        [b'0'] => digits.len() == raw.len(), // `0`, not `-0`
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    // 2^53 = 9007199254740992 has 16 digits: anything shorter is below it
    plain
        && (digits.len() < 16
            || (digits.len() == 16 && digits.parse::<u64>().is_ok_and(|n| n < 1 << 53)))
}

struct PathVisitor<'p> {
    path: &'p [String],
}

impl<'de> Visitor<'de> for PathVisitor<'_> {
    type Value = Found;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Found, A::Error> {
        let (wanted, rest) = (&self.path[0], &self.path[1..]);
        let mut found: Option<Found> = None;
        while let Some(name) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match compare(&name, wanted) {
                NameMatch::Exact => {
                    let value = map.next_value_seed(PathSeed { path: rest })?;
                    found = Some(match found {
                        None => value,
                        Some(_) => Found::Ambiguous,
                    });
                }
                NameMatch::Copy => {
                    map.next_value::<IgnoredAny>()?;
                    found = Some(Found::Ambiguous);
                }
                NameMatch::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(found.unwrap_or(Found::Nothing))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Found, A::Error> {
        let index = self.path[0].parse::<usize>().ok();
        let mut found = Found::Nothing;
        let mut i = 0usize;
        loop {
            if Some(i) == index {
                match seq.next_element_seed(PathSeed {
                    path: &self.path[1..],
                })? {
                    Some(value) => found = value,
                    None => break,
                }
            } else if seq.next_element::<IgnoredAny>()?.is_none() {
                break;
            }
            i += 1;
        }
        Ok(found)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Found, E> {
        Ok(Found::Nothing)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Found, E> {
        Ok(Found::Nothing)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Found, E> {
        Ok(Found::Nothing)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Found, E> {
        Ok(Found::Nothing)
    }
    fn visit_str<E>(self, _: &str) -> Result<Found, E> {
        Ok(Found::Nothing)
    }
    fn visit_unit<E>(self) -> Result<Found, E> {
        Ok(Found::Nothing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(body: &str, path: &str) -> Result<Option<String>, ReadError> {
        let path: Vec<String> = path.split('.').map(str::to_string).collect();
        json_value(body.as_bytes(), &path).map(|v| v.map(|v| String::from_utf8(v).unwrap()))
    }

    fn value(body: &str) -> Option<String> {
        at(body, "phone").expect("a readable member")
    }

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

    #[test]
    fn json_values_follow_the_path() {
        assert_eq!(value(r#"{"phone":"+62 812"}"#), Some("+62 812".into()));
        assert_eq!(value(r#"{"phone":"\u002b62"}"#), Some("+62".into()));
        assert_eq!(
            at(r#"{"user":{"phone":6281}}"#, "user.phone"),
            Ok(Some("6281".into()))
        );
        assert_eq!(at(r#"{"to":["a","b"]}"#, "to.1"), Ok(Some("b".into())));
        assert_eq!(at(r#"{"b":true}"#, "b"), Ok(Some("true".into())));
        for missing in [
            r#"{"phone":null}"#,
            r#"{"phone":{}}"#,
            r#"{"phone":""}"#,
            r#"{"x":1}"#,
            "[1]",
            "{",
            "{\"phone\":\"1\"} x",
            "",
        ] {
            assert_eq!(value(missing), None, "{missing}");
        }
        assert_eq!(value("\u{feff}{\"phone\":\"1\"}"), Some("1".into()));
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert_eq!(value(&deep), None);
    }

    #[test]
    fn only_plain_integers_below_2_53_are_keyed_by_their_digits() {
        for plain in [
            "0",
            "5",
            "-5",
            "6281234567890",
            "9007199254740991",
            "-9007199254740991",
        ] {
            let body = format!(r#"{{"phone":{plain}}}"#);
            assert_eq!(value(&body).as_deref(), Some(plain), "{plain}");
        }
        for unclear in [
            "-0",
            "0.0",
            "6281234567890.0",
            "628123456789e1",
            "6.28123456789E12",
            "628123456777.0",
            "1e21",
            "1E2",
            "0.5",
            "1e-400",
            "1e400",
            "9007199254740992",
            "9007199254740993",
            "-9007199254740992",
            "9007199254740995",
            "12345678901234567890",
            "100000000000000000000000",
        ] {
            let body = format!(r#"{{"phone":{unclear}}}"#);
            assert_eq!(
                at(&body, "phone"),
                Err(ReadError::Unclear(NOT_PLAIN_INTEGER)),
                "{unclear}"
            );
        }
        // not JSON numbers: the body does not parse
        for bad in [
            "0812", "+62", ".5", "5.", "0x10", "Infinity", "NaN", "1e", "-",
        ] {
            let body = format!(r#"{{"phone":{bad}}}"#);
            assert_eq!(value(&body), None, "{bad}");
        }
    }

    #[test]
    fn a_copy_on_the_path_is_ambiguous_elsewhere_not() {
        for body in [
            r#"{"phone":"A","phone":"B"}"#,
            r#"{"phone":"A","PHONE":"B"}"#,
            r#"{"PHONE":"B"}"#,
            r#"{"phone ":"B"}"#,
            r#"{"phone\u0000":"B"}"#,
            r#"{"phone[]":"B"}"#,
            r#"{"\ufeffphone":"B"}"#,
            r#"{"\u0070hone":"B","phone":"A"}"#,
        ] {
            assert_eq!(at(body, "phone"), Err(ReadError::Ambiguous), "{body}");
        }
        assert_eq!(
            at(r#"{"u":{"p":"A","p":"B"}}"#, "u.p"),
            Err(ReadError::Ambiguous)
        );
        assert_eq!(
            at(r#"{"U":{"p":"B"},"u":{"p":"A"}}"#, "u.p"),
            Err(ReadError::Ambiguous)
        );
        assert_eq!(at(r#"{"u":{"P":"B"}}"#, "u.p"), Err(ReadError::Ambiguous));
        assert_eq!(
            value(r#"{"x":{"p":1,"p":2},"PHONES":1,"phone":"A"}"#),
            Some("A".into())
        );
    }
}

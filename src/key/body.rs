//! Key parts read from a request body: `json:PATH` from a JSON body, `form:NAME` from an
//! `application/x-www-form-urlencoded` one (decoded like a query string, which is read the same
//! way). A member named twice on the path, or a form field named twice, is ambiguous:
//! frameworks disagree about which copy they use, so a duplicate could be counted as one value
//! and acted on as another.
//!
//! Differences from parsing into a `serde_json::Value`: a map keeps the last of two equal
//! member names, which would hide the duplicate; here the walk follows the path itself, checks
//! each object on it for duplicates, and skips everything else without building it. Values:
//! a string gives its decoded text, a number its text as written, `true`/`false` their names;
//! `null`, an object, an array, a missing member or a body that does not parse (nested past
//! serde_json's depth limit included) give nothing.

use std::fmt;

use http::header::CONTENT_TYPE;
use http::HeaderMap;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::value::Ambiguous;

/// What kind of body a request says it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// `application/json` or `application/*+json`.
    Json,
    /// `application/x-www-form-urlencoded`.
    Form,
}

/// The kind of body `Content-Type` names, if it is one key parts read.
pub fn kind(headers: &HeaderMap) -> Option<BodyKind> {
    let value = headers.get(CONTENT_TYPE)?.to_str().ok()?;
    let media = value.split(';').next()?.trim().to_ascii_lowercase();
    let (kind, subtype) = media.split_once('/')?;
    match (kind, subtype) {
        ("application", "json") => Some(BodyKind::Json),
        ("application", s) if s.ends_with("+json") => Some(BodyKind::Json),
        ("application", "x-www-form-urlencoded") => Some(BodyKind::Form),
        _ => None,
    }
}

/// What the walk found at the end of the path.
enum Found {
    Value(Vec<u8>),
    Nothing,
    Ambiguous,
}

/// The value at `path` of the JSON `body`.
pub fn json_value(body: &[u8], path: &[String]) -> Result<Option<Vec<u8>>, Ambiguous> {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    let mut de = serde_json::Deserializer::from_slice(body);
    let found = match (PathSeed { path }).deserialize(&mut de) {
        Ok(found) if de.end().is_ok() => found,
        _ => return Ok(None),
    };
    match found {
        Found::Value(v) => Ok(Some(v)),
        Found::Nothing => Ok(None),
        Found::Ambiguous => Err(Ambiguous),
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

/// The key material of a JSON value: strings decoded, numbers as written, booleans by name.
fn scalar(raw: &str) -> Found {
    match raw.as_bytes().first() {
        Some(b'"') => match serde_json::from_str::<String>(raw) {
            Ok(s) if !s.is_empty() => Found::Value(s.into_bytes()),
            _ => Found::Nothing,
        },
        Some(b't' | b'f') => Found::Value(raw.as_bytes().to_vec()),
        Some(b'-' | b'0'..=b'9') => Found::Value(raw.as_bytes().to_vec()),
        _ => Found::Nothing,
    }
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
            if name != wanted.as_str() {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let value = map.next_value_seed(PathSeed { path: rest })?;
            found = Some(match found {
                None => value,
                Some(_) => Found::Ambiguous,
            });
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

/// The decoded values of field `name` in a form body or query string, in order: pairs split
/// on `&`, `+` read as a space, `%XX` decoded to the byte (not to text: bytes that are not
/// UTF-8 stay apart, so they can be escaped apart).
pub fn form_values<'a>(input: &'a [u8], name: &'a str) -> impl Iterator<Item = Vec<u8>> + 'a {
    input
        .split(|&b| b == b'&')
        .filter(|pair| !pair.is_empty())
        .filter_map(move |pair| {
            let (k, v) = match pair.iter().position(|&b| b == b'=') {
                Some(i) => (&pair[..i], &pair[i + 1..]),
                None => (pair, &pair[pair.len()..]),
            };
            (decode(k) == name.as_bytes()).then(|| decode(v))
        })
}

fn decode(bytes: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(body: &str, path: &str) -> Result<Option<String>, ()> {
        let path: Vec<String> = path.split('.').map(str::to_string).collect();
        json_value(body.as_bytes(), &path)
            .map(|v| v.map(|v| String::from_utf8(v).unwrap()))
            .map_err(|_| ())
    }

    #[test]
    fn json_values_follow_the_path() {
        assert_eq!(
            at(r#"{"phone":"+62 812"}"#, "phone"),
            Ok(Some("+62 812".into()))
        );
        assert_eq!(
            at(r#"{"phone":"\u002b62"}"#, "phone"),
            Ok(Some("+62".into()))
        );
        assert_eq!(
            at(r#"{"user":{"phone":6281}}"#, "user.phone"),
            Ok(Some("6281".into()))
        );
        assert_eq!(at(r#"{"to":["a","b"]}"#, "to.1"), Ok(Some("b".into())));
        assert_eq!(at(r#"{"n":1.50e3}"#, "n"), Ok(Some("1.50e3".into())));
        assert_eq!(at(r#"{"b":true}"#, "b"), Ok(Some("true".into())));
        for missing in [
            r#"{"phone":null}"#,
            r#"{"phone":{}}"#,
            r#"{"x":1}"#,
            "[1]",
            "{",
            "{\"phone\":\"1\"} x",
            "",
        ] {
            assert_eq!(at(missing, "phone"), Ok(None), "{missing}");
        }
        assert_eq!(
            at("\u{feff}{\"phone\":\"1\"}", "phone"),
            Ok(Some("1".into()))
        );
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert_eq!(at(&deep, "phone"), Ok(None));
    }

    #[test]
    fn a_duplicate_on_the_path_is_ambiguous_elsewhere_not() {
        assert_eq!(at(r#"{"phone":"A","phone":"B"}"#, "phone"), Err(()));
        assert_eq!(at(r#"{"u":{"p":"A","p":"B"}}"#, "u.p"), Err(()));
        assert_eq!(
            at(r#"{"x":{"p":1,"p":2},"phone":"A"}"#, "phone"),
            Ok(Some("A".into()))
        );
    }

    #[test]
    fn form_fields_decode_like_queries() {
        let values: Vec<Vec<u8>> = form_values(b"a=1&user=j%C3%B6rg+x&b", "user").collect();
        assert_eq!(values, vec!["jörg x".as_bytes().to_vec()]);
        let raw: Vec<Vec<u8>> = form_values(b"u=%FF%fe", "u").collect();
        assert_eq!(raw, vec![vec![0xFF, 0xFE]]);
        assert_eq!(form_values(b"u=1&u=2", "u").count(), 2);
    }
}

//! Key parts read from a JSON body (`json:PATH`; which kind of body a request says it carries is
//! `body_kind.rs`, form bodies are read in `form.rs`). A key is the value the upstream will act on,
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

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::names::{compare, NameMatch};
use super::read_error::ReadError;

/// What the walk found at the end of the path.
enum Found {
    Value(Vec<u8>),
    Nothing,
    Ambiguous,
    /// What the value must be, and its text.
    Unclear(&'static str, String),
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
        Found::Unclear(what, written) => Err(ReadError::Unclear { what, written }),
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
            false => Found::Unclear(NOT_PLAIN_INTEGER, raw.to_string()),
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
                Err(ReadError::Unclear {
                    what: NOT_PLAIN_INTEGER,
                    written: unclear.to_string()
                }),
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

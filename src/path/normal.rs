//! Path normalisation: the one spelling of a path that routing, keying and forwarding all see,
//! so no other spelling of a limited path can reach the upstream uncounted.
//!
//! Steps, in order:
//! 1. percent-escapes are checked and decoded when they encode an unreserved character
//!    (RFC 3986 6.2.2.2: `%6F` -> `o`, `%2e` -> `.`); other escapes stay, with upper-case hex
//!    (6.2.2.1), so `%2f` and `%2F` are one spelling;
//! 2. runs of `/` are merged into one;
//! 3. dot-segments are removed (RFC 3986 5.2.4), including those written `%2e`.
//!
//! Differences from RFC 3986 5.2.4, which silently drops a `..` that climbs above the root: such
//! a path is refused, as are paths that still hold an encoded `/` or `\`, a raw `\`, a NUL or
//! another control character (encoded or not, C1 controls such as U+0085 included), or a
//! malformed escape: one that is not two hex digits, or escaped bytes that spell an overlong
//! UTF-8 form (`%C0%AE`, which lenient decoders read as `.`). Upstream frameworks decode and
//! resolve those in ways that differ from one another, so no safe single spelling exists.
//! Slashes are merged before dot-segments are removed, so `/a//../b` is `/b`, never `/a/b`.
//!
//! Routing and the `path` key part read one more form of the result ([`super::routing_form`]).

use std::borrow::Cow;

/// Why a path cannot be normalised; each becomes a 400.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path does not start with `/` (`*`, or an empty origin form).
    #[error("the request path must start with `/`")]
    NotAbsolute,
    /// A `%` not followed by two hex digits.
    #[error("the request path has a malformed percent-escape")]
    MalformedEscape,
    /// `%2F` or `%5C`: a separator hidden from routing.
    #[error("the request path has an encoded `/` or `\\`")]
    EncodedSeparator,
    /// A raw `\`, which some servers read as `/`.
    #[error("the request path has a `\\`")]
    Backslash,
    /// A NUL or another control character, raw or encoded.
    #[error("the request path has a control character")]
    ControlCharacter,
    /// A `..` segment above the root.
    #[error("the request path climbs above the root with `..`")]
    AboveRoot,
}

impl PathError {
    /// The snake_case code of the 400 problem body.
    pub fn code(self) -> &'static str {
        match self {
            PathError::NotAbsolute => "path_not_absolute",
            PathError::MalformedEscape => "path_malformed_escape",
            PathError::EncodedSeparator => "path_encoded_separator",
            PathError::Backslash => "path_backslash",
            PathError::ControlCharacter => "path_control_character",
            PathError::AboveRoot => "path_above_root",
        }
    }
}

/// The normalised form of `path` (borrowed when it already is normal).
pub fn normalize(path: &str) -> Result<Cow<'_, str>, PathError> {
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if is_plain(path) {
        return Ok(Cow::Borrowed(path));
    }
    let decoded = decode_unreserved(path)?;
    let merged = merge_slashes(&decoded);
    remove_dot_segments(&merged).map(Cow::Owned)
}

/// True for the common case that needs no work: no `%`, `\`, control byte, `//`, or dot-segment.
fn is_plain(path: &str) -> bool {
    let bytes = path.as_bytes();
    let mut previous = 0u8;
    for (i, &b) in bytes.iter().enumerate() {
        let unusual = b == b'%' || b == b'\\' || b.is_ascii_control() || b == C1_LEAD;
        if unusual || (b == b'/' && previous == b'/') {
            return false;
        }
        if b == b'.' && previous == b'/' {
            let rest = &bytes[i..];
            if rest == b"." || rest == b".." || rest.starts_with(b"./") || rest.starts_with(b"../")
            {
                return false;
            }
        }
        previous = b;
    }
    true
}

/// Step 1: checks every escape, decodes unreserved ones, upper-cases the hex of the rest.
fn decode_unreserved(path: &str) -> Result<String, PathError> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    // the byte the previous escape or character ended with, raw or decoded
    let mut previous = 0u8;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b != b'%' {
            if let Some(e) = forbidden_pair(previous, b) {
                return Err(e);
            }
            previous = b;
        }
        match b {
            b'\\' => return Err(PathError::Backslash),
            b if b.is_ascii_control() => return Err(PathError::ControlCharacter),
            b'%' => {
                let (Some(hi), Some(lo)) = (
                    bytes.get(i + 1).copied().and_then(hex_value),
                    bytes.get(i + 2).copied().and_then(hex_value),
                ) else {
                    return Err(PathError::MalformedEscape);
                };
                let decoded = hi << 4 | lo;
                if let Some(e) = forbidden_pair(previous, decoded) {
                    return Err(e);
                }
                previous = decoded;
                match decoded {
                    b'/' | b'\\' => return Err(PathError::EncodedSeparator),
                    c if c.is_ascii_control() => return Err(PathError::ControlCharacter),
                    c if is_unreserved(c) => out.push(c),
                    c => {
                        out.push(b'%');
                        out.push(HEX_UPPER[(c >> 4) as usize]);
                        out.push(HEX_UPPER[(c & 0xf) as usize]);
                    }
                }
                i += 3;
                continue;
            }
            _ => out.push(b),
        }
        i += 1;
    }
    // Only ASCII bytes were replaced by ASCII bytes: UTF-8 of the input is intact.
    Ok(String::from_utf8(out).expect("decoding unreserved escapes keeps UTF-8 valid"))
}

/// The lead byte of the UTF-8 form of U+0080 .. U+00BF, the C1 controls among them.
const C1_LEAD: u8 = 0xC2;

/// Why byte `second` cannot follow byte `first` in a path, raw or escaped: a C1 control
/// (U+0080 .. U+009F), or the start of an overlong UTF-8 form (a lead byte with a continuation
/// that spells a shorter one: `C0 AE` is `.` to a lenient decoder).
fn forbidden_pair(first: u8, second: u8) -> Option<PathError> {
    match (first, second) {
        (C1_LEAD, 0x80..=0x9F) => Some(PathError::ControlCharacter),
        (0xC0 | 0xC1, 0x80..=0xBF) | (0xE0, 0x80..=0x9F) | (0xF0, 0x80..=0x8F) => {
            Some(PathError::MalformedEscape)
        }
        _ => None,
    }
}

/// Upper-case hex digits, by value.
pub(super) const HEX_UPPER: [u8; 16] = *b"0123456789ABCDEF";

/// The value of one hex digit.
pub fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// RFC 3986 2.3: ALPHA / DIGIT / "-" / "." / "_" / "~".
pub fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Step 2: `//` -> `/`.
fn merge_slashes(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if c == '/' && out.ends_with('/') {
            continue;
        }
        out.push(c);
    }
    out
}

/// Step 3: RFC 3986 5.2.4 on a path that starts with `/` and has no empty segments, except that
/// a `..` with nothing left to remove is an error. A trailing `.` or `..` leaves a trailing `/`.
fn remove_dot_segments(path: &str) -> Result<String, PathError> {
    let mut segments: Vec<&str> = Vec::new();
    let mut parts = path[1..].split('/').peekable();
    let mut trailing_slash = false;
    while let Some(segment) = parts.next() {
        let last = parts.peek().is_none();
        match segment {
            "." => trailing_slash = last,
            ".." => {
                if segments.pop().is_none() {
                    return Err(PathError::AboveRoot);
                }
                trailing_slash = last;
            }
            s => {
                segments.push(s);
                trailing_slash = false;
            }
        }
    }
    let mut out = String::with_capacity(path.len());
    for s in &segments {
        out.push('/');
        out.push_str(s);
    }
    if trailing_slash || out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(path: &str) -> String {
        normalize(path)
            .unwrap_or_else(|e| panic!("{path:?}: {e}"))
            .into_owned()
    }

    #[test]
    fn bypass_spellings_become_the_canonical_path() {
        for spelling in [
            "/api/otp/send",
            "//api/otp/send",
            "/api//otp/send",
            "/api/otp//send",
            "/api/%6Ftp/send",
            "/api/%6ftp/send",
            "/%61pi/otp/send",
            "/api/x/../otp/send",
            "/api/./otp/send",
            "/api/%2e/otp/send",
            "/api/x/%2E%2E/otp/send",
            "/api/x/.%2e/otp/send",
            "/api/x//..//otp/send",
        ] {
            assert_eq!(ok(spelling), "/api/otp/send", "{spelling}");
        }
    }

    #[test]
    fn refused_paths_name_their_reason() {
        let cases = [
            ("/api/otp%2Fsend", PathError::EncodedSeparator),
            ("/api/otp%2fsend", PathError::EncodedSeparator),
            ("/api/otp%5Csend", PathError::EncodedSeparator),
            ("/api/otp\\send", PathError::Backslash),
            ("/api/otp%00", PathError::ControlCharacter),
            ("/api/otp%0a", PathError::ControlCharacter),
            ("/api/otp%7F", PathError::ControlCharacter),
            ("/api/otp%C2%85", PathError::ControlCharacter),
            ("/api/otp\u{85}", PathError::ControlCharacter),
            ("/api/%C0%AE%C0%AE/otp", PathError::MalformedEscape),
            ("/api/%c1%9c", PathError::MalformedEscape),
            ("/api/%E0%80%AE", PathError::MalformedEscape),
            ("/api/%F0%80%80%AE", PathError::MalformedEscape),
            ("/api/otp%", PathError::MalformedEscape),
            ("/api/otp%4", PathError::MalformedEscape),
            ("/api/otp%zz", PathError::MalformedEscape),
            ("/..", PathError::AboveRoot),
            ("/api/../../etc", PathError::AboveRoot),
            ("/%2e%2e/x", PathError::AboveRoot),
            ("*", PathError::NotAbsolute),
            ("", PathError::NotAbsolute),
        ];
        for (path, expected) in cases {
            assert_eq!(normalize(path), Err(expected), "{path:?}");
        }
    }

    #[test]
    fn other_escapes_stay_encoded_with_upper_case_hex() {
        assert_eq!(ok("/a%20b/%c3%a9"), "/a%20b/%C3%A9");
        assert_eq!(ok("/a%3fb"), "/a%3Fb");
        assert_eq!(ok("/100%25"), "/100%25");
        // UTF-8 that is no control nor overlong form, and lone Latin-1 bytes, stay
        assert_eq!(
            ok("/%c2%a9/%E0%A4%85/%F0%9F%98%80"),
            "/%C2%A9/%E0%A4%85/%F0%9F%98%80"
        );
        assert_eq!(ok("/%C0/%e9/\u{a9}\u{e9}"), "/%C0/%E9/\u{a9}\u{e9}");
    }

    #[test]
    fn dot_segments_follow_rfc_3986() {
        assert_eq!(ok("/a/b/c/./../../g"), "/a/g");
        assert_eq!(ok("/a/b/.."), "/a/");
        assert_eq!(ok("/a/b/."), "/a/b/");
        assert_eq!(ok("/a/.."), "/");
        assert_eq!(ok("/."), "/");
        assert_eq!(ok("/a/..b/c"), "/a/..b/c");
        assert_eq!(ok("/a/.b"), "/a/.b");
        assert_eq!(ok("/"), "/");
        assert_eq!(ok("///"), "/");
    }

    #[test]
    fn plain_paths_are_borrowed() {
        assert!(matches!(normalize("/api/otp/send"), Ok(Cow::Borrowed(_))));
        assert!(matches!(
            normalize("/a/.well-known/x"),
            Ok(Cow::Borrowed(_))
        ));
    }

    fn path_strategy() -> impl Strategy<Value = String> {
        let segment = prop_oneof![
            Just(String::new()),
            Just(".".to_string()),
            Just("..".to_string()),
            Just("%2e".to_string()),
            Just("%2E%2e".to_string()),
            Just("%6F".to_string()),
            Just("%41".to_string()),
            Just("%20".to_string()),
            Just("%c3%a9".to_string()),
            "[a-z0-9._~-]{1,4}",
        ];
        proptest::collection::vec(segment, 0..8).prop_map(|s| format!("/{}", s.join("/")))
    }

    /// A canonical path (segments of unreserved characters) and a random other spelling of it:
    /// extra slashes, `.` and `x/..` segments, unreserved characters percent-encoded.
    fn canonical_and_spelling() -> impl Strategy<Value = (String, String)> {
        let segments = proptest::collection::vec("[a-zA-Z0-9._~-]{1,6}", 1..6)
            .prop_filter("no dot-segments in the canonical form", |s| {
                !s.iter().any(|x| x == "." || x == "..")
            });
        (segments, proptest::collection::vec(0u8..8, 64)).prop_map(|(segments, noise)| {
            let canonical = format!("/{}", segments.join("/"));
            let mut noise = noise.into_iter().cycle();
            let mut spelling = String::new();
            for segment in &segments {
                spelling.push('/');
                match noise.next().unwrap() {
                    0 => spelling.push('/'),
                    1 => spelling.push_str("./"),
                    2 => spelling.push_str("zz/../"),
                    3 => spelling.push_str("%2e/"),
                    _ => {}
                }
                for c in segment.chars() {
                    if noise.next().unwrap() < 3 {
                        spelling.push_str(&format!("%{:02X}", c as u8));
                    } else {
                        spelling.push(c);
                    }
                }
            }
            (canonical, spelling)
        })
    }

    proptest! {
        #[test]
        fn every_spelling_of_a_path_normalises_to_it((canonical, spelling) in canonical_and_spelling()) {
            prop_assert_eq!(normalize(&spelling).expect("a spelling normalises"), canonical);
        }

        #[test]
        fn normalisation_is_idempotent(path in path_strategy()) {
            if let Ok(once) = normalize(&path) {
                let twice = normalize(&once).expect("a normal path normalises");
                prop_assert_eq!(once.as_ref(), twice.as_ref());
            }
        }

        #[test]
        fn normal_paths_have_no_ambiguous_parts(path in path_strategy()) {
            if let Ok(n) = normalize(&path) {
                prop_assert!(n.starts_with('/'));
                prop_assert!(!n.contains("//"));
                prop_assert!(!n.split('/').any(|s| s == "." || s == ".."));
                prop_assert!(!n.contains("%2E") && !n.contains("%6F") && !n.contains("%41"));
            }
        }
    }
}

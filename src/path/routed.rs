//! The form a normalised path is routed and keyed in: what upstream frameworks read as one path
//! is one string here, so a route cannot be dodged by a spelling that its upstream routes to the
//! same handler. From the normal form ([`super::normalize`]):
//! - each segment's `;` parameters are cut (`/api/otp;jsessionid=1` is `/api/otp`), as servlet
//!   containers route, and the result normalised again (`/a/..;/b` is `/b`);
//! - an escape of a printable ASCII character is decoded (`%3A` is `:`, `%40` is `@`), as
//!   frameworks decode a path before routing it, except `%25` (`%`), `%3F` (`?`), `%23` (`#`)
//!   and `%3B` (`;`), whose decoding would change where the path ends or what is cut;
//! - a byte above ASCII is written as an escape with upper-case hex (`é` is `%C3%A9`), the
//!   way browsers and HTTP clients send it, so a route written either way matches both.
//!
//! The request still goes upstream in its normal form, as the client spelled it.

use std::borrow::Cow;

use super::normal::{hex_value, normalize, PathError, HEX_UPPER};

/// The routing form of the normal path `path`; borrowed when it has no `;`, no escape and
/// nothing above ASCII (the common case).
pub fn routing_form(path: &str) -> Result<Cow<'_, str>, PathError> {
    if !path
        .bytes()
        .any(|b| b == b';' || b == b'%' || !b.is_ascii())
    {
        return Ok(Cow::Borrowed(path));
    }
    let cut = match path.contains(';') {
        true => Cow::Owned(normalize(&without_parameters(path))?.into_owned()),
        false => Cow::Borrowed(path),
    };
    Ok(Cow::Owned(canonical_escapes(&cut)))
}

/// `path` with each segment's `;` parameters cut.
fn without_parameters(path: &str) -> String {
    let mut cut = String::with_capacity(path.len());
    for (i, segment) in path.split('/').enumerate() {
        if i > 0 {
            cut.push('/');
        }
        cut.push_str(segment.split(';').next().unwrap_or_default());
    }
    cut
}

/// Printable ASCII escapes decoded (but those of `%`, `?`, `#` and `;`), bytes above ASCII
/// escaped, upper-case hex. `path` is normal: every escape is well-formed.
fn canonical_escapes(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len() + 8);
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let decoded = match (b, bytes.get(i + 1..i + 3)) {
            (b'%', Some(&[hi, lo])) => hex_value(hi).zip(hex_value(lo)).map(|(h, l)| h << 4 | l),
            _ => None,
        };
        match decoded {
            Some(c) if (0x20..0x7f).contains(&c) && !matches!(c, b'%' | b'?' | b'#' | b';') => {
                out.push(c as char);
                i += 3;
            }
            Some(c) => {
                push_escape(&mut out, c);
                i += 3;
            }
            None if !b.is_ascii() => {
                push_escape(&mut out, b);
                i += 1;
            }
            None => {
                out.push(b as char);
                i += 1;
            }
        }
    }
    out
}

fn push_escape(out: &mut String, b: u8) {
    out.push('%');
    out.push(HEX_UPPER[(b >> 4) as usize] as char);
    out.push(HEX_UPPER[(b & 0xf) as usize] as char);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routed(path: &str) -> Result<String, PathError> {
        routing_form(path).map(Cow::into_owned)
    }

    #[test]
    fn routing_ignores_path_parameters() {
        for (path, expected) in [
            ("/api/otp;jsessionid=1", "/api/otp"),
            ("/api/otp;a=1;b=2/send", "/api/otp/send"),
            ("/a;x/b", "/a/b"),
            ("/a/;x/b", "/a/b"),
            ("/a/..;/b", "/b"),
            ("/a/.;x/b", "/a/b"),
            ("/;x", "/"),
            ("/a%3Bx/b", "/a%3Bx/b"),
        ] {
            assert_eq!(routed(path).as_deref(), Ok(expected), "{path}");
        }
        assert_eq!(routed("/..;/etc"), Err(PathError::AboveRoot));
        assert!(matches!(routing_form("/api/otp"), Ok(Cow::Borrowed(_))));
    }

    #[test]
    fn a_spelling_frameworks_route_alike_is_one_path() {
        for (a, b) in [
            ("/api/users:send", "/api/users%3Asend"),
            ("/u/a@b", "/u/a%40b"),
            ("/caf\u{e9}/x", "/caf%C3%A9/x"),
            ("/caf%C3%A9/x", "/caf%C3%A9/x"),
            ("/a b", "/a%20b"),
            ("/x+y", "/x%2By"),
        ] {
            let (a, b) = (routed(a).unwrap(), routed(&normalize(b).unwrap()).unwrap());
            assert_eq!(a, b);
        }
        assert_eq!(routed("/caf\u{e9}").unwrap(), "/caf%C3%A9");
    }

    #[test]
    fn escapes_that_would_change_the_path_stay() {
        for path in ["/100%25", "/a%3Fb", "/a%23b", "/a%3Bb", "/%FF"] {
            assert_eq!(routed(path).unwrap(), path);
        }
    }
}

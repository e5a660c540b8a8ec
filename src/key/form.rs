//! URL-encoded names and values: `form:NAME` key parts from an
//! `application/x-www-form-urlencoded` body, `query:NAME` parts (read the same way), the
//! query's copies of a body part, and the cookies PHP reads as one. Pairs split on `&`, `+`
//! reads as a space, `%XX` decodes to the byte (not to text: bytes that are not UTF-8 stay
//! apart, so they can be escaped apart). Names decode like values, so `%70hone` is `phone`.
//!
//! Differences from a plain parser, for a key the upstream must read the same way: a field
//! named twice, or in a spelling a framework folds into its name (`PHONE`, `phone[]`: see
//! `names.rs`), is ambiguous; so is a field whose pair holds a raw `;`, or a `;`-separated
//! piece that names it (`x=1;phone=V`), since some parsers (Go before 1.17, Python before
//! 3.9.2) split pairs on `;` too.

use std::borrow::Cow;

use super::names::{compare_bytes, php_reads_as, NameMatch};
use super::read_error::ReadError;

/// The value of field `name` in a form body or a query (`None` when it is absent); ambiguous
/// when the input names it more than once, in any spelling.
pub fn field(input: &[u8], name: &str) -> Result<Option<Vec<u8>>, ReadError> {
    let mut found: Option<Vec<u8>> = None;
    let mut ambiguous = false;
    for pair in pairs(input) {
        let (key, value) = split_pair(pair);
        let named = compare_bytes(&decode(key), name);
        if (named != NameMatch::Other && pair.contains(&b';')) || names_in_pieces(pair, name) {
            ambiguous = true;
        }
        match named {
            NameMatch::Exact if found.is_none() => found = Some(decode(value).into_owned()),
            NameMatch::Exact | NameMatch::Copy => ambiguous = true,
            NameMatch::Other => {}
        }
    }
    match ambiguous {
        true => Err(ReadError::Ambiguous),
        false => Ok(found.filter(|v| !v.is_empty())),
    }
}

/// Whether a query names `name` in any spelling (its exact name or a folded copy).
pub fn names(input: &[u8], name: &str) -> bool {
    pairs(input).any(|pair| {
        compare_bytes(&decode(split_pair(pair).0), name) != NameMatch::Other
            || names_in_pieces(pair, name)
    })
}

/// The values of the cookies PHP reads as `name`, in one `Cookie` header line, as PHP reads
/// them: the line split on `;`, each cookie's name after its leading spaces taken as it is
/// (case and escapes kept, as PHP 8 keeps them) or as PHP registers a name (`phone.x` is
/// `phone_x`), its value with `%XX` decoded (a `+` stays a `+`).
pub fn cookie_values<'a>(line: &'a [u8], name: &'a str) -> impl Iterator<Item = Cow<'a, [u8]>> {
    line.split(|&b| b == b';').filter_map(move |cookie| {
        let (key, value) = split_pair(cookie);
        // PHP skips the spaces before a name; one after it is its own (`phone ` is `phone_`)
        let key = std::str::from_utf8(key.trim_ascii_start()).ok()?;
        php_reads_as(key, name).then(|| decode_escapes(value.trim_ascii(), false))
    })
}

/// A query's pairs in order, each name and value decoded to bytes as a `query:` part reads them
/// (the admin API's parameters: a `value=` that is not UTF-8 keeps its bytes, as a header's).
pub fn decoded_pairs(input: &[u8]) -> impl Iterator<Item = (Cow<'_, [u8]>, Cow<'_, [u8]>)> {
    pairs(input).map(|pair| {
        let (name, value) = split_pair(pair);
        (decode(name), decode(value))
    })
}

/// The non-empty `&`-separated pairs.
fn pairs(input: &[u8]) -> impl Iterator<Item = &[u8]> {
    input.split(|&b| b == b'&').filter(|pair| !pair.is_empty())
}

/// A pair's name and value, split at the first `=` (a pair without one has an empty value).
fn split_pair(pair: &[u8]) -> (&[u8], &[u8]) {
    match pair.iter().position(|&b| b == b'=') {
        Some(i) => (&pair[..i], &pair[i + 1..]),
        None => (pair, &pair[pair.len()..]),
    }
}

/// Whether a `;`-separated piece after the first of `pair` names `name` in any spelling.
fn names_in_pieces(pair: &[u8], name: &str) -> bool {
    pair.split(|&b| b == b';')
        .skip(1)
        .any(|piece| compare_bytes(&decode(split_pair(piece).0), name) != NameMatch::Other)
}

/// `+` as a space and `%XX` as its byte; borrowed when there is neither.
fn decode(bytes: &[u8]) -> Cow<'_, [u8]> {
    decode_escapes(bytes, true)
}

/// `%XX` as its byte, and with `plus_is_space` `+` as a space; borrowed when there is neither.
fn decode_escapes(bytes: &[u8], plus_is_space: bool) -> Cow<'_, [u8]> {
    let plus = |b: u8| plus_is_space && b == b'+';
    if !bytes.iter().any(|&b| plus(b) || b == b'%') {
        return Cow::Borrowed(bytes);
    }
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b if plus(b) => out.push(b' '),
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
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(body: &str) -> Result<Option<String>, ()> {
        field(body.as_bytes(), "phone")
            .map(|v| v.map(|v| String::from_utf8(v).unwrap()))
            .map_err(|_| ())
    }

    #[test]
    fn fields_decode_like_queries() {
        let user = field(b"a=1&user=j%C3%B6rg+x&b", "user");
        assert_eq!(user, Ok(Some("jörg x".as_bytes().to_vec())));
        assert_eq!(field(b"u=%FF%fe", "u"), Ok(Some(vec![0xFF, 0xFE])));
        assert_eq!(field(b"u=1&u=2", "u"), Err(ReadError::Ambiguous));
        assert_eq!(read("a=1&phone=%2B62+812&b=2"), Ok(Some("+62 812".into())));
        assert_eq!(read("%70hone=1"), Ok(Some("1".into())));
        assert_eq!(read("phone="), Ok(None));
        assert_eq!(read("a=1"), Ok(None));
        assert_eq!(read("phones=1&xphone=2&phone.x=3"), Ok(None));
    }

    #[test]
    fn a_field_named_twice_in_any_spelling_is_ambiguous() {
        for body in [
            "phone=1&phone=2",
            "phone=&phone=2",
            "phone=1&PHONE=2",
            "PHONE=2",
            "phone[]=2",
            "phone%5B%5D=2",
            "phone+=2",
            "%20phone=2",
            "phone%00=2",
            "%EF%BB%BFphone=2",
            "phone=1;x=2",
            "x=1;phone=2",
            "x=1;PHONE[]=2",
        ] {
            assert_eq!(read(body), Err(()), "{body}");
        }
    }

    #[test]
    fn a_query_names_a_field_in_any_spelling() {
        for query in [
            "phone=1",
            "a=1&PHONE=2",
            "%70hone=3",
            "phone[]",
            "x=1;phone=2",
            " phone=1",
        ] {
            assert!(names(query.as_bytes(), "phone"), "{query}");
        }
        for query in ["", "a=1", "phones=1", "ph=one", "x=phone"] {
            assert!(!names(query.as_bytes(), "phone"), "{query}");
        }
    }
}

//! Keys by value, generated: every spelling of one JSON value (string escapes, whitespace, member
//! order, other members around it) derives one key, a number only when written as a plain
//! integer below 2^53 (every other form is unclear); every body that names the
//! wanted member or field in a folded spelling (JSON, form, or the query) is ambiguous.

use http::{HeaderMap, HeaderValue, Method};
use proptest::prelude::*;

use super::body::{is_plain_integer, NOT_PLAIN_INTEGER};
use super::*;
use crate::config::{KeyPart, KeyPartSpec, KeySpec, Normalize};

fn headers(content_type: &'static str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("content-type", HeaderValue::from_static(content_type));
    h
}

fn derive(
    spec: &KeySpec,
    content_type: &'static str,
    query: Option<&str>,
    body: &str,
) -> Result<String, KeyError> {
    let h = headers(content_type);
    let src = KeySource {
        route: "otp",
        method: &Method::POST,
        path: "/api/otp/send",
        path_case: PathCase::Insensitive,
        query,
        headers: &h,
        authority: None,
        body: Some(body.as_bytes()),
        client_ip: "203.0.113.7".parse().unwrap(),
        ipv6_prefix: 64,
        jwt: None,
        hash_secret: None,
    };
    derive_key(spec, OnMissingKey::Reject, &src)
}

fn json_part(normalize: Option<Normalize>) -> KeySpec {
    KeySpec {
        parts: vec![KeyPartSpec {
            normalize,
            region: normalize.map(|_| phonenumber::country::Id::ID),
            ..KeyPartSpec::plain(KeyPart::Json(vec!["phone".into()]))
        }],
    }
}

/// JSON whitespace, possibly none.
fn space() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![Just(' '), Just('\t'), Just('\n'), Just('\r')],
        0..3,
    )
    .prop_map(|s| s.into_iter().collect())
}

/// The decimal `digits` x 10^`exp` written in one of several equal forms.
fn number_spelling(digits: &str, exp: i32, form: u8, pad: usize) -> String {
    let zeros = "0".repeat(pad);
    match form % 6 {
        // digits, then the exponent
        0 => format!("{digits}e{exp}"),
        // one digit before the point, upper-case E, explicit sign
        1 => {
            let (first, rest) = digits.split_at(1);
            let e = exp + rest.len() as i32;
            let point = if rest.is_empty() && zeros.is_empty() {
                ""
            } else {
                "."
            };
            format!(
                "{first}{point}{rest}{zeros}E{}{e}",
                if e >= 0 { "+" } else { "" }
            )
        }
        // trailing zeros on the digits, the exponent taking them back
        2 => format!("{digits}{zeros}e{}", exp - pad as i32),
        // all digits after the point
        3 => format!("0.{digits}e{}", exp + digits.len() as i32),
        // a plain decimal when the exponent allows one
        4 if exp >= 0 => format!("{digits}{}.{zeros}0", "0".repeat(exp as usize)),
        // a plain integer when the exponent allows one
        5 if exp >= 0 => format!("{digits}{}", "0".repeat(exp as usize)),
        _ => format!("{digits}e{exp}"),
    }
}

/// A string's characters, each written as itself or as a JSON escape.
fn string_spelling(text: &str, escapes: &[bool]) -> String {
    let mut out = String::from("\"");
    for (c, escape) in text.chars().zip(escapes.iter().cycle()) {
        match (c, escape) {
            ('"' | '\\', _) => {
                out.push('\\');
                out.push(c);
            }
            ('/', true) => out.push_str("\\/"),
            (c, &escape) if escape || c.is_control() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04X}"));
                }
            }
            (c, _) => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Members that are not the wanted one (nor a copy of it), placed around it.
fn other_members() -> impl Strategy<Value = Vec<String>> {
    let member = prop_oneof![
        Just(r#""password":"x""#.to_string()),
        Just(r#""phones":[1,2,{"phone":"nested"}]"#.to_string()),
        Just(r#""user":{"phone":"elsewhere","PHONE":2}"#.to_string()),
        Just(r#""n":1.0e3"#.to_string()),
        Just(r#""ph":null"#.to_string()),
        Just(r#""flag":true"#.to_string()),
    ];
    proptest::collection::vec(member, 0..4)
}

/// A body holding `"phone": value` among `others`, with whitespace between every token.
fn body_with(value: &str, others: &[String], at: usize, ws: &[String]) -> String {
    let mut members: Vec<String> = others.to_vec();
    let name = "\"phone\"";
    members.insert(
        at % (others.len() + 1),
        format!("{name}{}:{}{value}", ws[0], ws[1]),
    );
    format!(
        "{}{{{}{}}}{}",
        ws[2],
        members.join(&format!("{},", ws[3])),
        ws[1],
        ws[0]
    )
}

/// A decimal number, as digits without leading zero and a power of ten, and five spellings.
fn numbers() -> impl Strategy<Value = (Vec<String>, String)> {
    (
        "[1-9][0-9]{0,14}",
        -20i32..20,
        proptest::collection::vec((0u8..6, 0usize..4), 5),
    )
        .prop_map(|(digits, exp, forms)| {
            let spellings = forms
                .iter()
                .map(|&(form, pad)| number_spelling(&digits, exp, form, pad))
                .collect();
            (spellings, format!("{digits}e{exp}"))
        })
}

proptest! {
    #[test]
    fn a_number_is_its_digits_when_plain_and_unclear_otherwise(
        (spellings, _) in numbers(),
        others in other_members(),
        at in 0usize..5,
        ws in proptest::collection::vec(space(), 4),
        negative in any::<bool>(),
    ) {
        let spec = json_part(None);
        for spelling in &spellings {
            let spelling = if negative { format!("-{spelling}") } else { spelling.clone() };
            let body = body_with(&spelling, &others, at, &ws);
            // the exact value, as a decimal parser with no rounding reads it
            let exact = spelling.trim_start_matches('-').parse::<u64>().ok().filter(|&n| n < 1 << 53);
            let expected = match exact {
                Some(n) if n > 0 || !negative => Ok(spelling.clone()),
                _ => Err(KeyError::Unclear { part: "json:phone".into(), what: NOT_PLAIN_INTEGER }),
            };
            prop_assert_eq!(is_plain_integer(&spelling), expected.is_ok(), "{}", spelling);
            prop_assert_eq!(derive(&spec, "application/json", None, &body), expected, "{}", body);
        }
    }

    #[test]
    fn every_spelling_of_a_phone_number_derives_one_key(
        national in 0u64..100_000_000,
        escapes in proptest::collection::vec(any::<bool>(), 1..8),
        others in other_members(),
        at in 0usize..5,
        ws in proptest::collection::vec(space(), 4),
    ) {
        // an Indonesian mobile number, +62 812 ...: as a string in several writings, and as a
        // plain JSON integer
        let digits = format!("62812{national:08}");
        let spec = json_part(Some(Normalize::Phone));
        let expected = derive(&spec, "application/json", None, &format!(r#"{{"phone":"+{digits}"}}"#));
        prop_assume!(expected.is_ok());
        let spellings = [
            string_spelling(&format!("+{digits}"), &escapes),
            string_spelling(&format!("0812-{}-{}", &digits[5..9], &digits[9..]), &escapes),
            string_spelling(&format!("+62 812-{}-{}", &digits[5..9], &digits[9..]), &escapes),
            string_spelling(&format!("008 62 {}", &digits[2..]), &escapes),
            digits.clone(),
        ];
        for spelling in &spellings {
            let body = body_with(spelling, &others, at, &ws);
            prop_assert_eq!(&derive(&spec, "application/json", None, &body), &expected, "{}", body);
        }
    }

    #[test]
    fn every_spelling_of_a_string_derives_one_key(
        text in "[a-zA-Z0-9 +/.@\"\\\\\u{e9}\u{1F600}-]{1,12}",
        escapes in proptest::collection::vec(any::<bool>(), 1..8),
        others in other_members(),
        at in 0usize..5,
        ws in proptest::collection::vec(space(), 4),
    ) {
        let spec = json_part(None);
        let plain = derive(&spec, "application/json", None, &body_with(&string_spelling(&text, &[false]), &[], 0, &ws));
        let body = body_with(&string_spelling(&text, &escapes), &others, at, &ws);
        prop_assert_eq!(derive(&spec, "application/json", None, &body), plain, "{}", body);
    }
}

/// A spelling of `phone` that some framework folds into it, never `phone` itself: letters in
/// another case, padding at either end, a bracket suffix, and (in JSON) escaped characters.
fn copy_of_name() -> impl Strategy<Value = (String, Vec<bool>)> {
    let padding = prop_oneof![
        Just(""),
        Just(" "),
        Just("\t"),
        Just("\u{0}"),
        Just("\u{FEFF}"),
        Just("\u{200B}"),
        Just("\u{00A0}"),
        Just("\u{3000}"),
        Just("\u{2009}"),
    ];
    let suffix = prop_oneof![Just(""), Just("[]"), Just("[0]"), Just(" []")];
    let case = proptest::collection::vec(any::<bool>(), 5);
    (
        padding.clone(),
        padding,
        suffix,
        case,
        proptest::collection::vec(any::<bool>(), 1..6),
    )
        .prop_map(|(before, after, suffix, case, escapes)| {
            let mut letters: String = "phone"
                .chars()
                .zip(&case)
                .map(|(c, &up)| if up { c.to_ascii_uppercase() } else { c })
                .collect();
            if before.is_empty() && after.is_empty() && suffix.is_empty() && letters == "phone" {
                letters = "Phone".into();
            }
            (format!("{before}{letters}{after}{suffix}"), escapes)
        })
}

/// `text` percent-encoded where `which` says (cycled), `+` for some spaces.
fn percent_spelling(text: &str, which: &[bool]) -> String {
    let mut out = String::new();
    for (b, encode) in text.bytes().zip(which.iter().cycle()) {
        match (b, encode) {
            (b' ', false) => out.push('+'),
            (b, false) if b.is_ascii_alphanumeric() || b == b'[' || b == b']' => {
                out.push(b as char)
            }
            (b, _) => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

proptest! {
    #[test]
    fn a_folded_copy_of_a_json_member_is_ambiguous(
        (copy, escapes) in copy_of_name(),
        with_exact in any::<bool>(),
        others in other_members(),
        at in 0usize..5,
        ws in proptest::collection::vec(space(), 4),
    ) {
        let spec = json_part(None);
        let mut members = others.clone();
        members.insert(at % (others.len() + 1), format!("{}:\"6281\"", string_spelling(&copy, &escapes)));
        if with_exact {
            members.insert(at % members.len(), "\"phone\":\"6282\"".to_string());
        }
        let body = format!("{{{}}}", members.join(&format!("{},", ws[0])));
        prop_assert!(matches!(derive(&spec, "application/json", None, &body), Err(KeyError::Ambiguous { .. })), "{}", body);
    }

    #[test]
    fn a_folded_copy_of_a_form_field_is_ambiguous(
        (copy, encode) in copy_of_name(),
        with_exact in any::<bool>(),
        before in "[a-z]{1,6}=[a-z0-9]{0,4}",
        copy_first in any::<bool>(),
    ) {
        let spec = KeySpec::of([KeyPart::Form("phone".into())]);
        let copy = format!("{}=6281", percent_spelling(&copy, &encode));
        let mut pairs = vec![before, copy];
        if with_exact {
            pairs.insert(usize::from(copy_first) + 1, "phone=6282".to_string());
        }
        let body = pairs.join("&");
        prop_assert!(matches!(derive(&spec, "application/x-www-form-urlencoded", None, &body), Err(KeyError::Ambiguous { .. })), "{}", body);
    }

    #[test]
    fn the_body_part_named_in_the_query_is_ambiguous(
        (copy, encode) in copy_of_name(),
        exact in any::<bool>(),
        json in any::<bool>(),
        before in "[a-z]{1,6}=[a-z0-9]{0,4}",
    ) {
        // the body is clean; the query names the part, exactly or in a folded spelling
        let name = if exact { "phone".to_string() } else { copy };
        let query = format!("{before}&{}=6281", percent_spelling(&name, &encode));
        let (spec, content_type, body) = match json {
            true => (json_part(None), "application/json", r#"{"phone":"6282"}"#),
            false => (KeySpec::of([KeyPart::Form("phone".into())]), "application/x-www-form-urlencoded", "phone=6282"),
        };
        prop_assert_eq!(derive(&spec, content_type, None, body), Ok("6282".to_string()));
        prop_assert!(matches!(derive(&spec, content_type, Some(&query), body), Err(KeyError::Ambiguous { .. })), "{}", query);
    }
}

//! Key derivation: parts in order, fallback and escaping, and that no two tuples of part values
//! give one key.

use std::net::IpAddr;

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use proptest::prelude::*;

use super::escape::escape_owned;
use super::*;
use crate::config::{KeyPart, KeyPartSpec, KeySpec, Normalize};

fn source<'a>(headers: &'a HeaderMap, query: Option<&'a str>) -> KeySource<'a> {
    KeySource {
        route: "otp",
        method: &Method::POST,
        path: "/api/otp/send",
        path_case: PathCase::Insensitive,
        query,
        headers,
        authority: None,
        body: None,
        client_ip: "203.0.113.7".parse().unwrap(),
        ipv6_prefix: 64,
        jwt: None,
        hash_secret: None,
    }
}

#[test]
fn parts_join_in_config_order() {
    let h = HeaderMap::new();
    let spec = KeySpec::of([KeyPart::Ip, KeyPart::Method, KeyPart::Route, KeyPart::Path]);
    let key = derive_key(&spec, OnMissingKey::Reject, &source(&h, None)).unwrap();
    assert_eq!(key, "203.0.113.7|POST|otp|/api/otp/send");
}

#[test]
fn missing_parts_reject_or_fall_back_to_a_marked_ip() {
    let h = HeaderMap::new();
    let spec = KeySpec::of([
        KeyPart::Header(HeaderName::from_static("x-api-key")),
        KeyPart::Method,
    ]);
    let err = derive_key(&spec, OnMissingKey::Reject, &source(&h, None)).unwrap_err();
    assert_eq!(
        err,
        KeyError::Missing {
            part: "header:x-api-key".into()
        }
    );
    let key = derive_key(&spec, OnMissingKey::Ip, &source(&h, None)).unwrap();
    assert_eq!(key, "%ip:203.0.113.7|POST");
    // a client sending the IP as the header's value does not share the fallback's quota
    let mut sent = HeaderMap::new();
    sent.insert("x-api-key", HeaderValue::from_static("203.0.113.7"));
    let own = derive_key(&spec, OnMissingKey::Ip, &source(&sent, None)).unwrap();
    assert_ne!(own, key);
}

#[test]
fn separators_percent_controls_and_stray_bytes_are_escaped() {
    assert_eq!(escape(b"u|v"), "u%7Cv");
    assert_eq!(escape(b"100%"), "100%25");
    assert_eq!(escape(b"a\nb\x7f"), "a%0Ab%7F");
    assert_eq!(escape(b"\xff\xfe"), "%FF%FE");
    assert_eq!(escape("jörg ✓".as_bytes()), "jörg ✓");
    assert_ne!(escape(b"\xff"), escape(b"\xfe"));
}

#[test]
fn every_way_to_escape_writes_the_same_text() {
    let mut values: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b'a', b, b'z']).collect();
    for text in [
        "",
        "plain-id_7.x~",
        "jörg ✓",
        "a|b",
        "100%",
        "\u{85}",
        "tab\tand\u{7f}",
    ] {
        values.push(text.as_bytes().to_vec());
    }
    values.push(b"\xe2\x9c".to_vec());
    for value in values {
        let expected = escape(&value);
        let mut appended = String::from("before:");
        escape_into(&mut appended, &value);
        assert_eq!(appended, format!("before:{expected}"), "{value:?}");
        assert_eq!(escape_owned(value.clone()), expected, "{value:?}");
    }
    // the slow path still escapes each byte on its own
    assert_eq!(escape("a\u{85}b".as_bytes()), "a%C2%85b");
}

#[test]
fn a_plain_owned_value_becomes_the_key_without_a_copy() {
    let value = b"203.0.113.7".to_vec();
    let buffer = value.as_ptr();
    let key = escape_owned(value);
    assert_eq!(key, "203.0.113.7");
    assert_eq!(key.as_ptr(), buffer);
}

#[test]
fn query_values_are_decoded_and_the_path_follows_the_case_rule() {
    let h = HeaderMap::new();
    let spec = KeySpec::of([KeyPart::Query("user".into())]);
    let key = derive_key(
        &spec,
        OnMissingKey::Reject,
        &source(&h, Some("a=1&user=j%C3%B6rg+x")),
    )
    .unwrap();
    assert_eq!(key, "jörg x");
    let upper = KeySource {
        path: "/API/Otp",
        ..source(&h, None)
    };
    let spec = KeySpec::of([KeyPart::Path]);
    assert_eq!(
        derive_key(&spec, OnMissingKey::Reject, &upper).unwrap(),
        "/api/otp"
    );
    let sensitive = KeySource {
        path_case: PathCase::Sensitive,
        ..upper
    };
    assert_eq!(
        derive_key(&spec, OnMissingKey::Reject, &sensitive).unwrap(),
        "/API/Otp"
    );
    // as routing reads it: without `;` parameters or a trailing slash
    for sent in [
        "/API/Otp;jsessionid=1",
        "/api/otp/",
        "/api;v=1/otp;x/",
        "/api/x/..;/otp",
    ] {
        let src = KeySource {
            path: sent,
            ..source(&h, None)
        };
        assert_eq!(
            derive_key(&spec, OnMissingKey::Reject, &src).unwrap(),
            "/api/otp",
            "{sent}"
        );
    }
    let root = KeySource {
        path: "/",
        ..source(&h, None)
    };
    assert_eq!(derive_key(&spec, OnMissingKey::Reject, &root).unwrap(), "/");
}

#[test]
fn head_reads_as_get() {
    let h = HeaderMap::new();
    let spec = KeySpec::of([KeyPart::Method]);
    let head = KeySource {
        method: &Method::HEAD,
        ..source(&h, None)
    };
    assert_eq!(
        derive_key(&spec, OnMissingKey::Reject, &head).unwrap(),
        "GET"
    );
}

#[test]
fn body_parts_read_json_and_forms() {
    let mut h = HeaderMap::new();
    h.insert(
        "content-type",
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    let body = br#"{"phone":"0812-3456-7890","user":"A"}"#;
    let spec = KeySpec {
        parts: vec![KeyPartSpec {
            normalize: Some(Normalize::Phone),
            region: Some(phonenumber::country::Id::ID),
            ..KeyPartSpec::plain(KeyPart::Json(vec!["phone".into()]))
        }],
    };
    let src = KeySource {
        body: Some(body),
        ..source(&h, None)
    };
    assert_eq!(
        derive_key(&spec, OnMissingKey::Reject, &src).unwrap(),
        "+6281234567890"
    );
    let dup = br#"{"phone":"1","phone":"2"}"#;
    let src = KeySource {
        body: Some(dup),
        ..source(&h, None)
    };
    assert!(matches!(
        derive_key(&spec, OnMissingKey::Ip, &src),
        Err(KeyError::Ambiguous { .. })
    ));
    let mut form = HeaderMap::new();
    form.insert(
        "content-type",
        HeaderValue::from_static("application/x-www-form-urlencoded"),
    );
    let spec = KeySpec::of([KeyPart::Form("u".into())]);
    let src = KeySource {
        body: Some(b"u=a&u=b"),
        ..source(&form, None)
    };
    assert!(matches!(
        derive_key(&spec, OnMissingKey::Reject, &src),
        Err(KeyError::Ambiguous { .. })
    ));
    // the wrong content type reads nothing
    let src = KeySource {
        body: Some(body),
        ..source(&form, None)
    };
    let spec = KeySpec::of([KeyPart::Json(vec!["phone".into()])]);
    assert!(derive_key(&spec, OnMissingKey::Reject, &src).is_err());
}

#[test]
fn hashed_parts_never_show_the_raw_value() {
    let secret = crate::config::HashSecret(b"s3cret".to_vec());
    let spec = KeySpec {
        parts: vec![KeyPartSpec {
            hash: true,
            ..KeyPartSpec::plain(KeyPart::Header(HeaderName::from_static("x-api-key")))
        }],
    };
    let mut h = HeaderMap::new();
    h.insert("x-api-key", HeaderValue::from_static("live_abc123"));
    let src = KeySource {
        hash_secret: Some(&secret),
        ..source(&h, None)
    };
    let key = derive_key(&spec, OnMissingKey::Reject, &src).unwrap();
    assert_eq!(key.len(), 32);
    assert!(!key.contains("abc123"));
    let ctx = ValueContext {
        secret: Some(&secret),
        ipv6_prefix: 64,
        path_case: PathCase::Insensitive,
    };
    assert_eq!(key_of_values(&spec, &[b"live_abc123"], &ctx), Ok(key));
    assert!(key_of_values(&spec, &[b"a", b"b"], &ctx).is_err());
}

#[test]
fn ipv6_clients_group_by_prefix() {
    let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
    let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
    assert_eq!(ip_key(a, 64), "2001:db8:1:2::/64");
    assert_eq!(ip_key(a, 64), ip_key(b, 64));
    assert_ne!(ip_key(a, 128), ip_key(b, 128));
    assert_eq!(ip_key(a, 128), "2001:db8:1:2:aaaa::1");
    assert_eq!(ip_key("203.0.113.7".parse().unwrap(), 64), "203.0.113.7");
    assert_eq!(
        ip_key("::ffff:203.0.113.7".parse().unwrap(), 64),
        "203.0.113.7"
    );
}

/// A tuple of raw header values (any bytes a header may carry), `None` for a missing header.
fn tuples() -> impl Strategy<Value = Vec<Option<Vec<u8>>>> {
    let byte = prop_oneof![
        Just(b'|'),
        Just(b'%'),
        Just(b'a'),
        Just(0x80u8),
        Just(0xffu8),
        0x20u8..0x7f
    ];
    let value = proptest::collection::vec(byte, 1..6);
    proptest::collection::vec(proptest::option::of(value), 1..4)
}

fn key_of(tuple: &[Option<Vec<u8>>]) -> (KeySpec, String) {
    let names: Vec<HeaderName> = (0..tuple.len())
        .map(|i| HeaderName::from_bytes(format!("x-part-{i}").as_bytes()).unwrap())
        .collect();
    let mut h = HeaderMap::new();
    for (name, value) in names.iter().zip(tuple) {
        if let Some(v) = value {
            h.insert(name.clone(), HeaderValue::from_bytes(v).unwrap());
        }
    }
    let spec = KeySpec::of(names.into_iter().map(KeyPart::Header));
    let key = derive_key(&spec, OnMissingKey::Ip, &source(&h, None)).unwrap();
    (spec, key)
}

proptest! {
    #[test]
    fn two_different_tuples_never_give_the_same_key(a in tuples(), b in tuples()) {
        prop_assume!(a.len() == b.len() && a != b);
        let (_, ka) = key_of(&a);
        let (_, kb) = key_of(&b);
        prop_assert_ne!(ka, kb);
    }
}

#[test]
fn a_value_that_is_not_one_says_so_and_still_falls_back() {
    let h = {
        let mut h = HeaderMap::new();
        h.insert("content-type", HeaderValue::from_static("application/json"));
        h
    };
    let part = |normalize| KeySpec {
        parts: vec![KeyPartSpec {
            normalize: Some(normalize),
            region: Some(phonenumber::country::Id::ID),
            ..KeyPartSpec::plain(KeyPart::Json(vec!["phone".into()]))
        }],
    };
    for (normalize, body, detail) in [
        (
            Normalize::Phone,
            &br#"{"phone":"call me"}"#[..],
            "json:phone is not a valid phone number",
        ),
        (
            Normalize::Email,
            br#"{"phone":"Alice <a@example.com>"}"#,
            "json:phone is not a valid e-mail address",
        ),
    ] {
        let src = KeySource {
            body: Some(body),
            ..source(&h, None)
        };
        let err = derive_key(&part(normalize), OnMissingKey::Reject, &src).unwrap_err();
        assert!(err.to_string().starts_with(detail), "{err}");
        // an invalid value is a missing part: `on_missing_key = "ip"` still falls back
        let key = derive_key(&part(normalize), OnMissingKey::Ip, &src).unwrap();
        assert_eq!(key, "%ip:203.0.113.7");
    }
    // a number parsers read differently is no missing part: 400 `ambiguous_key` even with
    // `on_missing_key = "ip"`
    for number in ["1e999", "6281234567890.0", "9007199254740993"] {
        let body = format!(r#"{{"phone":{number}}}"#);
        let src = KeySource {
            body: Some(body.as_bytes()),
            ..source(&h, None)
        };
        for on_missing in [OnMissingKey::Reject, OnMissingKey::Ip] {
            let err = derive_key(&part(Normalize::Lower), on_missing, &src).unwrap_err();
            assert!(matches!(err, KeyError::Unclear { .. }), "{number}: {err}");
        }
    }
    let src = KeySource {
        body: Some(br#"{"user":"x"}"#),
        ..source(&h, None)
    };
    let err = derive_key(&part(Normalize::Phone), OnMissingKey::Reject, &src).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the request has no json:phone (needed for the rate-limit key)"
    );
}

//! The RESP parser and writer: every reply shape the decision calls meet, each cut at every
//! byte (a read may end anywhere), and the errors sorted as the client library sorts them.

use super::super::fred_error as kinds;
use super::*;

/// Parses `bytes` as if they arrived in two reads split at every position: no prefix may yield
/// a reply, the whole must yield `expected` and take every byte.
fn parses_at_every_split(bytes: &[u8], expected: &Reply) {
    for cut in 0..bytes.len() {
        assert_eq!(
            parse(&bytes[..cut]),
            Ok(None),
            "a prefix of {cut} bytes of {:?} is incomplete",
            String::from_utf8_lossy(bytes)
        );
    }
    assert_eq!(parse(bytes), Ok(Some((expected.clone(), bytes.len()))));
}

#[test]
fn every_reply_shape_waits_for_its_last_byte() {
    let cases: Vec<(&[u8], Reply)> = vec![
        (b":42\r\n", Reply::Integer(42)),
        (b":-7\r\n", Reply::Integer(-7)),
        (b"+OK\r\n", Reply::Simple("OK".into())),
        (b"$5\r\nhe\r\no\r\n", Reply::Bulk(Some(b"he\r\no".to_vec()))),
        (b"$0\r\n\r\n", Reply::Bulk(Some(Vec::new()))),
        (b"$-1\r\n", Reply::Bulk(None)),
        (b"*-1\r\n", Reply::Array(None)),
        (b"*0\r\n", Reply::Array(Some(Vec::new()))),
        (
            b"-NOSCRIPT No matching script.\r\n",
            Reply::Error("NOSCRIPT No matching script.".into()),
        ),
        (
            b"*3\r\n:1\r\n:-2\r\n:1732790000000000\r\n",
            Reply::Array(Some(vec![
                Reply::Integer(1),
                Reply::Integer(-2),
                Reply::Integer(1_732_790_000_000_000),
            ])),
        ),
        (
            b"*3\r\n*2\r\n:1\r\n$1\r\na\r\n*0\r\n*2\r\n$-1\r\n-ERR x\r\n",
            Reply::Array(Some(vec![
                Reply::Array(Some(vec![
                    Reply::Integer(1),
                    Reply::Bulk(Some(b"a".to_vec())),
                ])),
                Reply::Array(Some(Vec::new())),
                Reply::Array(Some(vec![Reply::Bulk(None), Reply::Error("ERR x".into())])),
            ])),
        ),
    ];
    for (bytes, expected) in &cases {
        parses_at_every_split(bytes, expected);
    }
}

#[test]
fn replies_back_to_back_are_taken_one_at_a_time() {
    let bytes = b"*2\r\n:1\r\n:2\r\n:3\r\n+OK\r\n";
    let (first, used) = parse(bytes).unwrap().unwrap();
    assert_eq!(
        first,
        Reply::Array(Some(vec![Reply::Integer(1), Reply::Integer(2)]))
    );
    let (second, more) = parse(&bytes[used..]).unwrap().unwrap();
    assert_eq!(second, Reply::Integer(3), "the WAIT behind a call");
    let (third, _) = parse(&bytes[used + more..]).unwrap().unwrap();
    assert_eq!(third, Reply::Simple("OK".into()));
}

#[test]
fn what_is_not_resp2_is_a_protocol_error() {
    assert!(parse(b"%1\r\n").is_err(), "a RESP3 map");
    assert!(parse(b":12x\r\n").is_err());
    assert!(
        parse(b"$3\r\nabcde\r\n").is_err(),
        "a bulk longer than announced"
    );
    assert!(parse(b"$-2\r\n").is_err());
    let deep = "*1\r\n".repeat(MAX_DEPTH + 1);
    assert!(parse(deep.as_bytes()).is_err());
}

#[test]
fn error_replies_become_the_errors_the_library_makes() {
    let noscript = Reply::Error("NOSCRIPT No matching script. Please use EVAL.".into());
    let e = noscript.into_integers().unwrap_err();
    assert!(kinds::is_noscript(&e));
    let missing = server_error("ERR Function not found");
    assert!(kinds::is_function_missing(&missing));
    assert_eq!(missing.kind(), &ErrorKind::Unknown);
    let moved = server_error("MOVED 3999 127.0.0.1:6381");
    assert_eq!(moved.kind(), &ErrorKind::Cluster);
    assert_eq!(moved.details(), "MOVED 3999 127.0.0.1:6381");
    assert_eq!(server_error("WRONGPASS invalid").kind(), &ErrorKind::Auth);
    assert_eq!(
        server_error("WRONGTYPE x").kind(),
        &ErrorKind::InvalidArgument
    );
}

#[test]
fn a_decision_reply_is_read_as_integers() {
    let reply = Reply::Array(Some(vec![Reply::Integer(5), Reply::Integer(0)]));
    assert_eq!(reply.into_integers().unwrap(), vec![5, 0]);
    let texts = Reply::Array(Some(vec![Reply::Bulk(Some(b"12".to_vec()))]));
    assert_eq!(
        texts.into_integers().unwrap(),
        vec![12],
        "as the library converts"
    );
    let nested = Reply::Array(Some(vec![Reply::Integer(1), Reply::Error("ERR in".into())]));
    assert!(nested.into_value().is_err());
}

#[test]
fn commands_are_arrays_of_bulk_strings() {
    let mut out = Vec::new();
    push_array(&mut out, 4);
    push_bulk(&mut out, b"FCALL");
    push_value(&mut out, &Value::from("decide"));
    push_value(&mut out, &Value::Integer(-12));
    push_key(&mut out, &Key::from("k"));
    assert_eq!(
        out,
        b"*4\r\n$5\r\nFCALL\r\n$6\r\ndecide\r\n$3\r\n-12\r\n$1\r\nk\r\n".to_vec()
    );
    assert!(!push_value(&mut out, &Value::Array(Vec::new())));
}

#[test]
fn numbers_read_as_the_standard_parser_reads_them() {
    let cases: [&[u8]; 18] = [
        b"0",
        b"-0",
        b"+7",
        b"42",
        b"-42",
        b"007",
        b"9223372036854775807",
        b"-9223372036854775808",
        b"9223372036854775808",
        b"-9223372036854775809",
        b"",
        b"-",
        b"+",
        b"+-1",
        b"1 ",
        b"1.5",
        b"\xff1",
        b"99999999999999999999",
    ];
    for line in cases {
        let standard = std::str::from_utf8(line)
            .ok()
            .and_then(|s| s.parse::<i64>().ok());
        assert_eq!(
            decimal(line),
            standard,
            "{:?}",
            String::from_utf8_lossy(line)
        );
    }
}

#[test]
fn a_line_ends_at_its_first_crlf_only() {
    assert_eq!(
        line(b":1\r2\r\n", 1),
        Some(&b"1\r2"[..]),
        "a lone CR is the line's"
    );
    assert_eq!(line(b"+a\rb", 1), None, "no CRLF yet");
    assert_eq!(line(b"+a\r", 1), None, "the LF may still come");
    assert_eq!(line(b"+ab\r\n+c\r\n", 1), Some(&b"ab"[..]));
}

#[test]
fn numbers_are_written_in_decimal() {
    for n in [0, 7, -7, 1_732_790_000_000_000, i64::MAX, i64::MIN] {
        let mut out = Vec::new();
        push_decimal(&mut out, n);
        assert_eq!(out, n.to_string().into_bytes());
        let mut bulk = Vec::new();
        assert!(push_value(&mut bulk, &Value::Integer(n)));
        assert_eq!(
            bulk,
            format!("${}\r\n{n}\r\n", n.to_string().len()).into_bytes()
        );
    }
}

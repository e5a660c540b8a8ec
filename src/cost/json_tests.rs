//! The JSON path scanner (`json.rs`) against documents whole and cut into chunks anywhere.

use super::json::{PathScanner, MAX_DEPTH};

fn scan(path: &str, chunks: &[&[u8]]) -> Option<u64> {
    let path: Vec<String> = path.split('.').map(str::to_string).collect();
    let mut s = PathScanner::new(path.into());
    for c in chunks {
        s.feed(c);
    }
    s.finish()
}

fn whole(path: &str, doc: &str) -> Option<u64> {
    scan(path, &[doc.as_bytes()])
}

#[test]
fn finds_the_member_on_the_path_only() {
    let doc = r#"{"id":"x","usage":{"prompt_tokens":9,"total_tokens":21},"total_tokens":5}"#;
    assert_eq!(whole("usage.total_tokens", doc), Some(21));
    assert_eq!(whole("total_tokens", doc), Some(5));
    assert_eq!(whole("usage.prompt_tokens", doc), Some(9));
    assert_eq!(whole("usage.missing", doc), None);
    assert_eq!(whole("a.1.n", r#"{"a":[{"n":1},{"n":2}]}"#), Some(2));
    assert_eq!(whole("a.n", r#"{"a":[{"n":1}]}"#), None);
    let nested = r#"{"x":{"usage":{"total_tokens":3}},"usage":{"total_tokens":4}}"#;
    assert_eq!(whole("usage.total_tokens", nested), Some(4));
    assert_eq!(whole("n", "  {\n\"n\" : 7 }\r\n"), Some(7));
}

#[test]
fn names_are_compared_decoded_and_the_last_copy_wins() {
    assert_eq!(whole("total_tokens", r#"{"total\u005ftokens":8}"#), Some(8));
    assert_eq!(whole("é", r#"{"\u00e9":8}"#), Some(8));
    assert_eq!(whole("😀", r#"{"\ud83d\ude00":8}"#), Some(8));
    assert_eq!(whole("n", r#"{"n":1,"n":2}"#), Some(2));
    assert_eq!(whole("n", r#"{"n":1,"n":"2"}"#), None);
    assert_eq!(whole("n", r#"{"n\"":1,"x":"n\\\"}"}"#), None);
    // a later copy of a member on the way replaces the earlier one whole
    let usage = |later: &str| {
        whole(
            "usage.n",
            &format!(r#"{{"usage":{{"n":23}},"usage":{later}}}"#),
        )
    };
    assert_eq!(usage("null"), None);
    assert_eq!(usage("{}"), None);
    assert_eq!(usage(r#"{"m":1}"#), None);
    assert_eq!(usage(r#"{"n":50}"#), Some(50));
    assert_eq!(whole("a.0.n", r#"{"a":[{"n":1}],"a":[]}"#), None);
    assert_eq!(whole("a.0.n", r#"{"a":[{"n":1}],"a":[{"n":2}]}"#), Some(2));
}

#[test]
fn states_nothing_unless_a_whole_number_in_a_whole_document() {
    for doc in [
        r#"{"n":1.5}"#,
        r#"{"n":-1}"#,
        r#"{"n":1e3}"#,
        r#"{"n":"12"}"#,
        r#"{"n":null}"#,
        r#"{"n":[1]}"#,
        r#"{"n":12"#,
        r#"{"n":12}}"#,
        r#"{"n":12} x"#,
        r#"{"n":12,}"#,
        r#"{"n":tru}"#,
        "{\"n\":12,\"s\":\"a\nb\"}",
        r#"{"n" 12}"#,
        // longer than the digits kept: never cut down to a number that fits
        r#"{"n":123456789012345678901234567890}"#,
        r#"{"n":1234567890123456789012345.5}"#,
        "",
    ] {
        assert_eq!(whole("n", doc), None, "{doc}");
    }
    assert_eq!(
        whole("n", r#"{"n":0,"t":true,"f":false,"z":null}"#),
        Some(0)
    );
}

#[test]
fn chunks_split_anywhere_read_as_the_whole() {
    let doc = r#"{"choices":[{"delta":{"content":"a \"quoted\" \\ \u00e9 }]"}}],"usage":{"total_tokens":1234}}"#;
    for cut in 0..=doc.len() {
        for cut2 in cut..=doc.len() {
            let (a, rest) = doc.as_bytes().split_at(cut);
            let (b, c) = rest.split_at(cut2 - cut);
            assert_eq!(
                scan("usage.total_tokens", &[a, b, c]),
                Some(1234),
                "{cut} {cut2}"
            );
        }
    }
}

#[test]
fn deep_documents_are_refused_not_followed() {
    let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
    assert_eq!(whole("0", &deep), None);
}

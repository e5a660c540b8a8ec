//! Header names as the HTTP specifications write them (`Retry-After`, `RateLimit-Policy`,
//! `X-Request-Id`), for answers that carry names as text, such as Envoy's header lists, where a
//! reader may compare them exactly. `http` keeps names in lower case, which is what goes on the
//! wire of HTTP/2 and what HTTP/1.1 readers fold to anyway.

/// `name` with each `-`-separated word capitalised, and `ratelimit` written `RateLimit` as the
/// IETF draft and the de-facto `X-RateLimit-*` headers spell it.
pub fn written(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for (i, word) in name.split('-').enumerate() {
        if i > 0 {
            out.push('-');
        }
        if word.eq_ignore_ascii_case("ratelimit") {
            out.push_str("RateLimit");
            continue;
        }
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            out.push(first.to_ascii_uppercase());
            out.extend(chars.map(|c| c.to_ascii_lowercase()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::written;

    #[test]
    fn names_are_written_as_the_specifications_write_them() {
        let cases = [
            ("ratelimit-policy", "RateLimit-Policy"),
            ("ratelimit", "RateLimit"),
            ("x-ratelimit-remaining", "X-RateLimit-Remaining"),
            ("retry-after", "Retry-After"),
            ("content-type", "Content-Type"),
            ("x-request-id", "X-Request-Id"),
        ];
        for (name, expected) in cases {
            assert_eq!(written(name), expected);
        }
    }
}

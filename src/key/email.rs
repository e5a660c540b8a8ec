//! `normalize = "email"`: the one spelling of a mailbox. Only a bare address makes a key; any
//! other form of RFC 5322 (a display name, angle brackets, a comment, a `mailto:` URI, a quoted
//! local part that still needs its quotes, an address literal) could be read as one mailbox by
//! one parser and as another, or as none, by the next, so it is not a value.
//!
//! The key of a bare address: trimmed, its local part in NFKC and lower case (as a username:
//! `super::fold`), `+tag` dropped from the local part, a quoted
//! local part whose content is a plain dot-atom read without its quotes (`"alice"@x`), the
//! domain without its trailing dot and in its ASCII form (IDNA, `bücher.de` ->
//! `xn--bcher-kva.de`; UTS 46 also maps full-width letters and dots).

use super::fold::{fold, is_invisible};

/// The key of `text` as an e-mail address, or `None` when it is not a bare address.
pub fn normalize_email(text: &str) -> Option<String> {
    let text = text.trim();
    if text
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || is_invisible(c))
    {
        return None;
    }
    let (local, domain) = split_address(text)?;
    if !is_dot_atom(local) {
        return None;
    }
    let local = fold(local);
    let local = local.split('+').next().unwrap_or_default();
    if local.is_empty() {
        return None;
    }
    let domain = ascii_domain(domain)?;
    Some(format!("{local}@{domain}"))
}

/// The local part (unquoted: a quoted one's content) and the domain, split at the one `@`.
/// `None` without an `@`, with another one, or with a quoted part that is not all of the local
/// part or holds a quoted pair (`\x`: read as `x` by some parsers and as `\x` by others).
fn split_address(text: &str) -> Option<(&str, &str)> {
    let (local, domain) = match text.strip_prefix('"') {
        Some(quoted) => {
            let (content, rest) = quoted.split_once('"')?;
            if content.contains('\\') {
                return None;
            }
            (content, rest.strip_prefix('@')?)
        }
        None => text.split_once('@')?,
    };
    if domain.contains('@') {
        return None;
    }
    Some((local, domain))
}

/// RFC 5322 dot-atom: atoms of `atext` (letters, digits, ``!#$%&'*+-/=?^_`{|}~``, and any
/// non-ASCII character, RFC 6531) joined by single dots.
fn is_dot_atom(text: &str) -> bool {
    let is_atext =
        |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c) || !c.is_ascii();
    text.split('.')
        .all(|atom| !atom.is_empty() && atom.chars().all(is_atext))
}

/// IDNA's deviation characters: `ß` and `ς` are themselves in IDNA 2008 (`faß.de` is
/// `xn--fa-hia.de`) and `ss` and `σ` in IDNA 2003 and UTS 46's transitional processing, which
/// many libraries still use (`fass.de`): which domain the upstream reads is unclear.
const DEVIATIONS: [char; 3] = ['ß', 'ẞ', 'ς'];

/// The domain in ASCII, lower case, without one trailing dot; `None` for an address literal
/// (`[192.0.2.1]`), an empty label, a deviation character, or a name IDNA refuses.
fn ascii_domain(domain: &str) -> Option<String> {
    let domain = domain.strip_suffix('.').unwrap_or(domain);
    if domain.is_empty() || domain.starts_with('[') || domain.contains(DEVIATIONS) {
        return None;
    }
    let ascii = idna::domain_to_ascii_strict(domain).ok()?;
    if ascii.is_empty() || ascii.split('.').any(str::is_empty) {
        return None;
    }
    Some(ascii)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_mailbox_are_one_key() {
        for spelling in [
            "alice@example.com",
            "Alice@Example.COM",
            "  alice@example.com\t",
            "alice+promo@example.com",
            "ALICE+x+y@example.com",
            "alice@example.com.",
            "\"alice\"@example.com",
            "\"Alice+tag\"@example.com",
            "alice@EXAMPLE.com.",
            "alice@example\u{FF0E}com",
        ] {
            assert_eq!(
                normalize_email(spelling).as_deref(),
                Some("alice@example.com"),
                "{spelling:?}"
            );
        }
        assert_eq!(
            normalize_email("jörg@Bücher.de").as_deref(),
            Some("jörg@xn--bcher-kva.de")
        );
        assert_eq!(
            normalize_email("o'brien.x@example.com").as_deref(),
            Some("o'brien.x@example.com")
        );
    }

    #[test]
    fn anything_but_a_bare_address_is_no_key() {
        for junk in [
            "",
            "no-at",
            "a@b@c",
            "@example.com",
            "alice@",
            "+tag@example.com",
            "Alice <alice@example.com>",
            "<alice@example.com>",
            "alice@example.com (comment)",
            "(comment)alice@example.com",
            "alice(c)@example.com",
            "mailto:alice@example.com",
            "MAILTO:alice@example.com",
            "al ice@example.com",
            "alice@exa mple.com",
            "alice\u{0}@example.com",
            "alice@example.com\u{0}",
            "alice\r\n@example.com",
            "\"al ice\"@example.com",
            "\"a@b\"@example.com",
            "\"al\\ice\"@example.com",
            "\"alice\"x@example.com",
            "\"\"@example.com",
            ".alice@example.com",
            "alice.@example.com",
            "al..ice@example.com",
            "alice@[192.0.2.1]",
            "alice@[IPv6:2001:db8::1]",
            "alice@example..com",
            "alice@example.com..",
            "alice@.example.com",
            "alice@exa_mple.com",
            "alice@-example.com",
            "alice@example.com,bob@example.com",
            "alice@example.com;",
            "ali\u{200B}ce@example.com",
            "\u{FEFF}alice@example.com",
            "\"alice\"",
            "a@faß.de",
            "a@faẞ.de",
            "a@ς.gr",
        ] {
            assert_eq!(normalize_email(junk), None, "{junk:?}");
        }
    }
}

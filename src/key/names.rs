//! Member and field names as the frameworks behind the gateway may read them. A body key part
//! names one member or field; a name that some framework folds into it (Go's `encoding/json`
//! matches member names ignoring case, PHP turns `phone[]` into `phone` and ` phone` into
//! `phone`) could carry the value the upstream acts on while the gateway counts another. Such a
//! name is a copy of the wanted one: the caller refuses the request rather than pick a copy.
//!
//! Differences from a plain case-insensitive compare: besides case (ASCII, and Unicode lower
//! case with every letter whose simple upper or lower case is ASCII, as Go's simple folding,
//! Java's `equalsIgnoreCase` and .NET's ordinal ignore-case compare read them: the Kelvin sign
//! `K` is `k`, the long `ſ` is `s`, the dotless `ı` and the dotted `İ` are `i`),
//! a copy may differ by surrounding whitespace (any Unicode space), NUL or invisible characters
//! (byte order mark, zero-width space and joiners, soft hyphen: anywhere in the name), a
//! bracket suffix (`phone[]`, `phone[0]`), and PHP's `.` and ` ` read as `_`; and a name is
//! also read as PHP (cut at a NUL, an unclosed `[` as `_`) and Rack 2 (brackets around the name
//! dropped) read it. The exact name is compared first, so the common case costs one comparison
//! and allocates nothing.

use super::fold::is_invisible;

/// How a name relates to the wanted one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameMatch {
    /// The very name.
    Exact,
    /// Another spelling of it that some framework reads as it.
    Copy,
    /// Another name.
    Other,
}

/// How `name` relates to `wanted`: a copy when any framework's reading of it ([`readings`])
/// folds to the wanted name.
pub fn compare(name: &str, wanted: &str) -> NameMatch {
    if name == wanted {
        return NameMatch::Exact;
    }
    match readings(name).any(|read| folded(read.as_ref()).eq(folded(wanted))) {
        true => NameMatch::Copy,
        false => NameMatch::Other,
    }
}

/// `name` as the frameworks that read it differently from each other take it: as it is (then
/// folded), as PHP reads it ([`php_reading`]), and as Rack 2 reads a name with brackets
/// (`\A[\[\]]*([^\[\]]+)\]*`: `]phone]`, `[phone` and `phone]` are `phone`).
fn readings(name: &str) -> impl Iterator<Item = std::borrow::Cow<'_, str>> {
    use std::borrow::Cow;
    let rack = name
        .contains(['[', ']'])
        .then(|| name.trim_start_matches(['[', ']']))
        .and_then(|rest| rest.split(['[', ']']).next());
    // PHP reads otherwise than folding only where a NUL or a `[` is (folding takes `.` and ` `)
    let php = name.contains(['\0', '[']).then(|| php_reading(name));
    [Some(name), rack]
        .into_iter()
        .flatten()
        .map(Cow::Borrowed)
        .chain(php.map(Cow::Owned))
}

/// Whether PHP registers `name` as `wanted` (exactly: PHP's names keep their case). Its
/// reading differs from the name only where a space, `.`, `[` or NUL is.
pub fn php_reads_as(name: &str, wanted: &str) -> bool {
    name == wanted || (name.contains([' ', '.', '[', '\0']) && php_reading(name) == wanted)
}

/// `name` as PHP registers a field (`php_register_variable_ex`): a C string (cut at its first
/// NUL), leading spaces skipped, ` ` and `.` as `_`; at the first `[`, an array (the name ends
/// there) when a `]` follows, else that `[` and every later ` `, `.` and `[` as `_`
/// (`phone[number` is `phone_number`, `a[b[c` is `a_b_c`).
fn php_reading(name: &str) -> String {
    let name = name
        .split('\0')
        .next()
        .unwrap_or_default()
        .trim_start_matches(' ');
    let underscored = |part: &str, also: &[char]| -> String {
        part.chars()
            .map(|c| match c == ' ' || c == '.' || also.contains(&c) {
                true => '_',
                false => c,
            })
            .collect()
    };
    match name.find('[') {
        Some(open) if name[open..].contains(']') => underscored(&name[..open], &[]),
        Some(open) => {
            underscored(&name[..open], &[]) + "_" + &underscored(&name[open + 1..], &['['])
        }
        None => underscored(name, &[]),
    }
}

/// How a name given as bytes (a decoded form field or query parameter, which need not be
/// UTF-8) relates to `wanted`. Bytes that are not UTF-8 are compared as they are.
pub fn compare_bytes(name: &[u8], wanted: &str) -> NameMatch {
    if name == wanted.as_bytes() {
        return NameMatch::Exact;
    }
    match std::str::from_utf8(name) {
        Ok(text) => compare(text, wanted),
        Err(_) => compare(&String::from_utf8_lossy(name), wanted),
    }
}

/// The characters of `name` as a folding framework compares them: the name's core (see
/// [`core`]) without invisible characters, each character case-folded as a value is
/// ([`super::fold::case_fold`]: `ı`, `İ` are `i`, `ſ` is `s`, the Kelvin sign `k`), `.` and
/// ` ` as `_`.
fn folded(name: &str) -> impl Iterator<Item = char> + '_ {
    core(name)
        .chars()
        .filter(|&c| !is_invisible(c))
        .flat_map(super::fold::case_fold)
        .map(|c| match c {
            '.' | ' ' => '_',
            c => c,
        })
}

/// The name without what surrounds it: whitespace, NUL and invisible characters at either end,
/// and a bracket suffix (`phone[]`, `phone[0]`, `phone [x]`) with what comes before it.
fn core(name: &str) -> &str {
    let trimmed = name.trim_matches(is_padding);
    match trimmed.find('[') {
        Some(open) if open > 0 && trimmed.ends_with(']') => {
            trimmed[..open].trim_end_matches(is_padding)
        }
        _ => trimmed,
    }
}

/// Characters a name may be padded with: Unicode whitespace, NUL, invisible characters.
fn is_padding(c: char) -> bool {
    c.is_whitespace() || c == '\0' || is_invisible(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exact_name_is_exact_and_other_names_are_other() {
        assert_eq!(compare("phone", "phone"), NameMatch::Exact);
        for other in ["phones", "phon", "ph one", "to", "", "[]", "p[hone]"] {
            assert_eq!(compare(other, "phone"), NameMatch::Other, "{other:?}");
        }
    }

    #[test]
    fn folded_spellings_are_copies() {
        for copy in [
            "PHONE",
            "Phone",
            "phone ",
            " phone",
            "\tphone\n",
            "phone\u{0}",
            "\u{0}phone",
            "ph\u{0}one",
            "\u{FEFF}phone",
            "ph\u{FEFF}one",
            "phone\u{200B}",
            "pho\u{00AD}ne",
            "phone\u{00A0}",
            "\u{3000}phone",
            "\u{2028}phone\u{2029}",
            "phone[]",
            "phone[0]",
            "PHONE []",
            "phone[x]",
        ] {
            assert_eq!(compare(copy, "phone"), NameMatch::Copy, "{copy:?}");
        }
        // Go's simple folding: the Kelvin sign and the long s
        assert_eq!(compare("\u{212A}ey", "key"), NameMatch::Copy);
        assert_eq!(compare("\u{017F}ms", "sms"), NameMatch::Copy);
        // Java's equalsIgnoreCase and .NET's ordinal ignore-case: the dotless and dotted i
        assert_eq!(compare("ema\u{0131}l", "email"), NameMatch::Copy);
        assert_eq!(compare("\u{0130}D", "id"), NameMatch::Copy);
        // PHP reads `.` and ` ` in a field name as `_`
        assert_eq!(compare("user.id", "user_id"), NameMatch::Copy);
        assert_eq!(compare("user id", "user_id"), NameMatch::Copy);
        // PHP cuts a name at its NUL, reads an unclosed `[` as `_` and every later `[` too
        assert_eq!(compare("phone\u{0}x", "phone"), NameMatch::Copy);
        assert_eq!(compare("phone[number", "phone_number"), NameMatch::Copy);
        assert_eq!(compare("api[key", "api_key"), NameMatch::Copy);
        assert_eq!(
            compare("phone[number\u{0}x", "phone_number"),
            NameMatch::Copy
        );
        assert_eq!(compare("a[b[c", "a_b_c"), NameMatch::Copy);
        assert_eq!(compare("a[b_c\u{0}z", "a_b_c"), NameMatch::Copy);
        assert_eq!(compare("a[b.c", "a_b_c"), NameMatch::Copy);
        assert_eq!(compare("  phone[x] ", "phone"), NameMatch::Copy);
        // Rack 2 drops the brackets around a name
        for rack in ["phone]", "[phone", "]phone]", "[[phone]]", "phone]x"] {
            assert_eq!(compare(rack, "phone"), NameMatch::Copy, "{rack:?}");
        }
    }

    #[test]
    fn names_as_bytes_fold_the_same() {
        assert_eq!(compare_bytes(b"phone", "phone"), NameMatch::Exact);
        assert_eq!(compare_bytes(b"PHONE[]", "phone"), NameMatch::Copy);
        assert_eq!(compare_bytes(b"phone\xff", "phone"), NameMatch::Other);
    }
}

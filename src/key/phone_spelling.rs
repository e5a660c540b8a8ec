//! A phone number's spelling read as libphonenumber reads its characters, before any of its
//! number rules: the digits (other scripts' digits as ASCII), whether a `+` leads them, and a
//! refusal of whatever it would read loosely (letters, extension marks, characters that are
//! neither digits nor the punctuation it skips).

/// The longest text libphonenumber parses.
const MAX_INPUT: usize = 250;

/// The spelling's digits (other scripts' digits as ASCII) and whether a `+` (or a full-width
/// `＋`) leads them; `None` for anything libphonenumber would read loosely: a letter, an
/// extension mark, a `+` after a digit or after punctuation, any character but digits,
/// punctuation and `*` (a tab inside is not a number to libphonenumber), a numeric character
/// that is no decimal digit of the Basic Multilingual Plane anywhere (`½`, `²`, a mathematical
/// digit, which some libphonenumber ports read as a digit and others drop). As libphonenumber
/// does, what comes before the first digit or `+` and after the last digit is dropped when it
/// holds no letter and no numeric character (`*+62...`, `"0812..."`, `...7890,`), a trailing
/// `#` excepted (it marks an extension), and a run of `+` reads as one (`++62...`).
pub fn screen(text: &str) -> Option<(bool, String)> {
    let text = text.trim();
    if text.chars().count() > MAX_INPUT {
        return None;
    }
    let is_digit = |c: char| c.is_ascii_digit() || other_script_digit(c).is_some();
    let start = text.find(|c: char| is_digit(c) || is_plus(c))?;
    let end = text.rfind(|c: char| c.is_alphanumeric() || c == '#')?;
    let end = end + text[end..].chars().next()?.len_utf8();
    if start >= end || text[..start].chars().any(char::is_alphanumeric) {
        return None;
    }
    let (mut plus, mut digits) = (false, String::with_capacity(text.len()));
    let mut pluses = true;
    for c in text[start..end].chars() {
        pluses &= is_plus(c);
        match c {
            '0'..='9' => digits.push(c),
            c if is_plus(c) && pluses => plus = true,
            // libphonenumber's star sign, punctuation to it
            '*' => {}
            c if is_punctuation(c) => {}
            c => digits.push(other_script_digit(c)?),
        }
    }
    (!digits.is_empty()).then_some((plus, digits))
}

/// A plus sign: ASCII or full-width.
fn is_plus(c: char) -> bool {
    matches!(c, '+' | '\u{FF0B}')
}

/// libphonenumber's `VALID_PUNCTUATION` but its tildes and `x` (an extension mark): dashes
/// (ASCII, Unicode's, the minus sign, full-width, the katakana long mark), dots, slashes,
/// brackets and parentheses (ASCII and full-width), spaces (ASCII, no-break, ideographic),
/// the soft hyphen, the zero-width space and the word joiner, which it skips between digits.
fn is_punctuation(c: char) -> bool {
    matches!(
        c,
        '-' | '\u{2010}'..='\u{2015}'
            | '\u{2212}'
            | '\u{30FC}'
            | '\u{FF0D}'..='\u{FF0F}'
            | '.'
            | '/'
            | '(' | ')' | '[' | ']'
            | '\u{FF08}' | '\u{FF09}' | '\u{FF3B}' | '\u{FF3D}'
            | ' ' | '\u{00A0}' | '\u{3000}'
            | '\u{00AD}' | '\u{200B}' | '\u{2060}'
    )
}

/// A decimal digit of another script as its ASCII digit: every zero of Unicode's decimal
/// digits (category Nd, Unicode 14) in the Basic Multilingual Plane, each the first of ten in a
/// row, as libphonenumber reads them (Java's `Character.digit` per UTF-16 unit, Python's
/// `unicodedata.digit`). A digit this drops or refuses while the upstream reads it would key
/// another number: `0812 3456 789០` (a Khmer zero) is `+6281234567890` there.
fn other_script_digit(c: char) -> Option<char> {
    const ZEROS: [u32; 36] = [
        0x0660, 0x06F0, 0x07C0, 0x0966, 0x09E6, 0x0A66, 0x0AE6, 0x0B66, 0x0BE6, 0x0C66, 0x0CE6,
        0x0D66, 0x0DE6, 0x0E50, 0x0ED0, 0x0F20, 0x1040, 0x1090, 0x17E0, 0x1810, 0x1946, 0x19D0,
        0x1A80, 0x1A90, 0x1B50, 0x1BB0, 0x1C40, 0x1C50, 0xA620, 0xA8D0, 0xA900, 0xA9D0, 0xA9F0,
        0xAA50, 0xABF0, 0xFF10,
    ];
    let code = c as u32;
    ZEROS
        .iter()
        .find(|&&zero| (zero..zero + 10).contains(&code))
        .map(|&zero| char::from(b'0' + (code - zero) as u8))
}

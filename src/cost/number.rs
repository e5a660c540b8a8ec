//! A cost as an answer states it: a plain whole number.

/// A cost as stated: a whole number (digits only, no sign, fraction or exponent) below 2^53;
/// anything else states none.
pub fn whole_number(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 16 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if text.len() > 1 && text[0] == b'0' {
        return None;
    }
    let n: u64 = std::str::from_utf8(text).ok()?.parse().ok()?;
    (n < 1 << 53).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_whole_numbers_state_a_cost() {
        assert_eq!(whole_number(b"0"), Some(0));
        assert_eq!(whole_number(b"1234"), Some(1234));
        for text in ["", "01", "-1", "1.0", "1e3", " 1", "9007199254740992", "x"] {
            assert_eq!(whole_number(text.as_bytes()), None, "{text}");
        }
    }
}

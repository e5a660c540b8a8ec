//! How a value is written into a key: the bytes that would end or confuse a key become `%XX`.
//! Most values (names, addresses, ids, numbers) have none of them: those are checked in one
//! pass and kept as they are, and an owned value becomes the key's text without a copy.

/// Escapes a value for the key: `%`, `|`, control characters and bytes that are not UTF-8
/// become `%XX` (of each byte); everything else stays as it is.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    escape_into(&mut out, bytes);
    out
}

/// [`escape`] of a value the caller owns and gives up: one with nothing to escape is the
/// key's text as it is, in the same buffer.
pub fn escape_owned(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(text) if text.bytes().all(is_plain) => text,
        Ok(text) => escape(text.as_bytes()),
        Err(e) => escape(e.as_bytes()),
    }
}

/// Appends [`escape`] of `bytes` to `out`.
pub fn escape_into(out: &mut String, bytes: &[u8]) {
    if let Some(plain) = plain_text(bytes) {
        out.push_str(plain);
        return;
    }
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '%' || c == '|' || c.is_control() {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    push_escaped(out, b);
                }
            } else {
                out.push(c);
            }
        }
        for &b in chunk.invalid() {
            push_escaped(out, b);
        }
    }
}

/// `bytes` as text when every byte of it stays as it is ([`is_plain`]).
fn plain_text(bytes: &[u8]) -> Option<&str> {
    match bytes.iter().copied().all(is_plain) {
        true => std::str::from_utf8(bytes).ok(),
        false => None,
    }
}

/// A byte that stays as it is whatever comes around it: printable ASCII but `%` and `|`.
/// Every other byte takes [`escape`]'s character by character path (which keeps non-ASCII
/// text that is not a control character).
fn is_plain(b: u8) -> bool {
    (0x20..0x7f).contains(&b) && b != b'%' && b != b'|'
}

fn push_escaped(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(HEX[(b >> 4) as usize] as char);
    out.push(HEX[(b & 0xf) as usize] as char);
}

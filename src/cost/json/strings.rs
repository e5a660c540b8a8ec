//! The strings of a JSON document as [`PathScanner`] reads them: value strings skipped, member
//! names decoded (escapes resolved, `\uXXXX` surrogate pairs joined, lone halves replaced) as
//! far as the path's names can be long.

use super::{Escape, PathScanner, State};

impl PathScanner {
    /// One byte of a string (a member name when `key`): escapes resolved for names.
    pub(super) fn string_byte(&mut self, b: u8, key: bool) {
        match self.escape {
            Escape::None => match b {
                b'"' => {
                    self.flush_high(key);
                    match key {
                        true => self.state = State::Colon,
                        false => self.end_value(),
                    }
                }
                b'\\' => self.escape = Escape::Backslash,
                c if c < 0x20 => self.state = State::Failed,
                c => {
                    self.flush_high(key);
                    self.push_key(key, &[c]);
                }
            },
            Escape::Backslash => {
                self.escape = Escape::None;
                let decoded = match b {
                    b'"' | b'\\' | b'/' => b,
                    b'b' => 0x08,
                    b'f' => 0x0c,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'u' => {
                        self.escape = Escape::Unicode(0, 0);
                        return;
                    }
                    _ => {
                        self.state = State::Failed;
                        return;
                    }
                };
                self.flush_high(key);
                self.push_key(key, &[decoded]);
            }
            Escape::Unicode(n, value) => {
                let Some(digit) = (b as char).to_digit(16) else {
                    self.state = State::Failed;
                    return;
                };
                let value = value << 4 | digit as u16;
                if n < 3 {
                    self.escape = Escape::Unicode(n + 1, value);
                    return;
                }
                self.escape = Escape::None;
                self.code_unit(value, key);
            }
        }
    }

    /// A `\uXXXX` code unit of a name, surrogate pairs joined, lone halves replaced.
    fn code_unit(&mut self, unit: u16, key: bool) {
        if let Some(high) = self.high.take() {
            if (0xDC00..0xE000).contains(&unit) {
                let c = 0x10000 + ((high as u32 - 0xD800) << 10) + (unit as u32 - 0xDC00);
                self.push_char(key, char::from_u32(c).unwrap_or('\u{FFFD}'));
                return;
            }
            self.push_char(key, '\u{FFFD}');
        }
        match unit {
            0xD800..=0xDBFF => self.high = Some(unit),
            0xDC00..=0xDFFF => self.push_char(key, '\u{FFFD}'),
            _ => self.push_char(key, char::from_u32(unit as u32).unwrap_or('\u{FFFD}')),
        }
    }

    fn flush_high(&mut self, key: bool) {
        if self.high.take().is_some() {
            self.push_char(key, '\u{FFFD}');
        }
    }

    fn push_char(&mut self, key: bool, c: char) {
        let mut buf = [0u8; 4];
        self.push_key(key, c.encode_utf8(&mut buf).as_bytes());
    }

    pub(super) fn push_key(&mut self, key: bool, bytes: &[u8]) {
        if !key || self.key_too_long {
            return;
        }
        if self.key.len() + bytes.len() > self.longest {
            self.key_too_long = true;
            return;
        }
        self.key.extend_from_slice(bytes);
    }
}

//! [`PathScanner`]: one member of a JSON document, found as the document streams past. It is fed
//! chunks as they come and keeps no byte of them: its memory is the stack of open containers
//! (whether each is on the path, an array's index), the member name being read (as long as
//! the path's names can be) and the digits of the wanted number. Names are compared decoded
//! (`"total\u005ftokens"` is `total_tokens`); when a name appears twice on the path the last
//! copy wins, as `JSON.parse` and Python's `json` read it; a document that does not parse
//! whole states nothing.
//!
//! Differences from parsing the document with serde_json: that needs the whole document in
//! memory, or a reader that blocks for the next chunk; this is a push parser, fed from a body's
//! `poll_frame` without delaying the chunk it reads.

use std::sync::Arc;

use crate::cost::number::whole_number;

mod sighting;
mod strings;

pub use sighting::NameSighting;

/// Containers nested deeper than this make the document unreadable (serde_json's own limit).
pub(super) const MAX_DEPTH: usize = 128;
/// Digits kept of the wanted number: more is no whole number below 2^53.
const MAX_DIGITS: usize = 24;

/// Where the scanner is in the grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A value is due.
    Value,
    /// After `{`: a member name or `}`.
    ObjectFirst,
    /// After `,` in an object: a member name.
    ObjectNext,
    /// In a member name.
    Key,
    /// After a member name: `:`.
    Colon,
    /// After `[`: a value or `]`.
    ArrayFirst,
    /// After a value: `,`, a closing bracket, or (at the top) the end.
    After,
    /// In a string value.
    Str,
    /// In a number.
    Number,
    /// In `true`, `false` or `null`: the bytes still due.
    Literal(&'static [u8]),
    /// The document is whole: only whitespace may follow.
    Done,
    /// Not JSON.
    Failed,
}

/// An escape being read in a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Escape {
    None,
    /// After `\`.
    Backslash,
    /// In `\uXXXX`: hex digits read, value so far.
    Unicode(u8, u16),
}

/// One open container.
#[derive(Debug, Clone, Copy)]
struct Frame {
    array: bool,
    /// An array's element index.
    index: u64,
    /// Whether the member now being read is the path's next step.
    member_on_path: bool,
}

/// The first [`MAX_DIGITS`] bytes of the wanted number, held in place (no allocation per
/// document).
#[derive(Debug, Clone, Copy, Default)]
struct Digits {
    bytes: [u8; MAX_DIGITS],
    len: usize,
}

impl Digits {
    /// Keeps `b`, unless [`MAX_DIGITS`] are kept already.
    fn push(&mut self, b: u8) {
        if let Some(slot) = self.bytes.get_mut(self.len) {
            *slot = b;
            self.len += 1;
        }
    }

    fn clear(&mut self) {
        self.len = 0;
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Finds the whole number at one path of a JSON document fed in chunks.
#[derive(Debug, Clone)]
pub struct PathScanner {
    path: Arc<[String]>,
    /// The longest name of the path: a longer member name cannot be on it.
    longest: usize,
    stack: Vec<Frame>,
    /// Open containers on the path: `stack[..on_path]`.
    on_path: usize,
    state: State,
    escape: Escape,
    /// A high surrogate waiting for its low half (`\uD83D\uDE00`).
    high: Option<u16>,
    key: Vec<u8>,
    key_too_long: bool,
    /// Whether the value being read is the wanted one.
    wanted: bool,
    digits: Digits,
    found: Option<u64>,
}

impl PathScanner {
    /// A scanner for `path` (member names, or array indexes, from the top; not empty).
    pub fn new(path: Arc<[String]>) -> PathScanner {
        let longest = path.iter().map(String::len).max().unwrap_or(0);
        PathScanner {
            path,
            longest,
            stack: Vec::new(),
            on_path: 0,
            state: State::Value,
            escape: Escape::None,
            high: None,
            key: Vec::new(),
            key_too_long: false,
            wanted: false,
            digits: Digits::default(),
            found: None,
        }
    }

    /// Starts a new document (keeping what it allocated).
    pub fn reset(&mut self) {
        self.stack.clear();
        self.on_path = 0;
        self.state = State::Value;
        self.escape = Escape::None;
        self.high = None;
        self.key.clear();
        self.key_too_long = false;
        self.wanted = false;
        self.digits.clear();
        self.found = None;
    }

    /// Whether the bytes so far cannot be JSON.
    pub fn failed(&self) -> bool {
        self.state == State::Failed
    }

    /// Reads the next bytes of the document.
    pub fn feed(&mut self, bytes: &[u8]) {
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            match self.state {
                State::Failed => return,
                State::Str => {
                    // the bulk of a document: run to the next quote or backslash
                    if self.escape == Escape::None {
                        match bytes[i..]
                            .iter()
                            .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
                        {
                            Some(skip) => i += skip,
                            None => return,
                        }
                    }
                    self.string_byte(bytes[i], false);
                    i += 1;
                }
                State::Key => {
                    // a name's plain bytes at once (most names have no escape)
                    if self.escape == Escape::None && self.high.is_none() {
                        let plain = bytes[i..]
                            .iter()
                            .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
                            .unwrap_or(bytes.len() - i);
                        if plain > 0 {
                            self.push_key(true, &bytes[i..i + plain]);
                            i += plain;
                            continue;
                        }
                    }
                    self.string_byte(bytes[i], true);
                    i += 1;
                }
                State::Number if is_number_byte(b) => {
                    if self.wanted {
                        self.digits.push(b);
                    }
                    i += 1;
                }
                State::Number => self.end_number(),
                State::Literal(rest) => {
                    if b != rest[0] {
                        self.state = State::Failed;
                        return;
                    }
                    match &rest[1..] {
                        [] => self.end_value(),
                        more => self.state = State::Literal(more),
                    }
                    i += 1;
                }
                _ if is_space(b) => i += 1,
                _ => {
                    // a structural byte: an `ArrayFirst` value is read again as a `Value`
                    if !self.structural(b) {
                        i += 1;
                    }
                }
            }
        }
    }

    /// The number at the path as the bytes read so far leave it: the last whole value there,
    /// unless a later copy on its way has begun (a document cut at a bound).
    pub fn found_so_far(&self) -> Option<u64> {
        self.found
    }

    /// The number at the path, once the document is whole; `None` when it is not, when the
    /// path is missing, or when its (last) value is no whole number below 2^53.
    pub fn finish(&mut self) -> Option<u64> {
        if self.state == State::Number && self.stack.is_empty() {
            self.end_number();
        }
        match self.state {
            State::Done => self.found,
            _ => None,
        }
    }

    /// One byte outside strings, numbers and literals; `true` when it must be read again.
    fn structural(&mut self, b: u8) -> bool {
        match (self.state, b) {
            (State::Value, _) => self.start_value(b),
            (State::ObjectFirst, b'}') => self.close(false),
            (State::ObjectFirst | State::ObjectNext, b'"') => {
                self.key.clear();
                self.key_too_long = false;
                self.state = State::Key;
            }
            (State::Colon, b':') => {
                let depth = self.stack.len();
                let on = self.on_path == depth
                    && depth <= self.path.len()
                    && !self.key_too_long
                    && self.path[depth - 1].as_bytes() == self.key.as_slice();
                self.top().member_on_path = on;
                self.state = State::Value;
            }
            (State::ArrayFirst, b']') => self.close(true),
            (State::ArrayFirst, _) => {
                self.element(0);
                self.state = State::Value;
                return true;
            }
            (State::After, b',') => match self.stack.last().map(|f| (f.array, f.index)) {
                Some((true, index)) => {
                    self.element(index + 1);
                    self.state = State::Value;
                }
                Some((false, _)) => self.state = State::ObjectNext,
                None => self.state = State::Failed,
            },
            (State::After, b'}') => self.close(false),
            (State::After, b']') => self.close(true),
            _ => self.state = State::Failed,
        }
        false
    }

    /// The first byte of a value.
    fn start_value(&mut self, b: u8) {
        let depth = self.stack.len();
        let on = depth == 0 || (self.on_path == depth && self.stack[depth - 1].member_on_path);
        self.wanted = on && depth == self.path.len();
        if on {
            // the last copy of a member named twice wins, with all it holds: a later copy of
            // the member or of one on its way (`"usage":null`) replaces what an earlier one said
            self.found = None;
        }
        match b {
            b'{' | b'[' => {
                if depth >= MAX_DEPTH {
                    self.state = State::Failed;
                    return;
                }
                self.stack.push(Frame {
                    array: b == b'[',
                    index: 0,
                    member_on_path: false,
                });
                if on && depth < self.path.len() {
                    self.on_path = depth + 1;
                }
                self.state = match b {
                    b'{' => State::ObjectFirst,
                    _ => State::ArrayFirst,
                };
            }
            b'"' => self.state = State::Str,
            b'-' | b'0'..=b'9' => {
                self.digits.clear();
                if self.wanted {
                    self.digits.push(b);
                }
                self.state = State::Number;
            }
            b't' => self.state = State::Literal(b"rue"),
            b'f' => self.state = State::Literal(b"alse"),
            b'n' => self.state = State::Literal(b"ull"),
            _ => self.state = State::Failed,
        }
    }

    /// Array element `index` is due: whether it is the path's next step.
    fn element(&mut self, index: u64) {
        let depth = self.stack.len();
        let on = self.on_path == depth
            && depth <= self.path.len()
            && self.path[depth - 1].parse::<u64>().ok() == Some(index)
            && self.path[depth - 1].bytes().all(|b| b.is_ascii_digit());
        let top = self.top();
        top.index = index;
        top.member_on_path = on;
    }

    fn top(&mut self) -> &mut Frame {
        self.stack.last_mut().expect("inside a container")
    }

    /// A closing bracket: it must close the container open.
    fn close(&mut self, array: bool) {
        match self.stack.pop() {
            Some(frame) if frame.array == array => {
                self.on_path = self.on_path.min(self.stack.len());
                self.end_value();
            }
            _ => self.state = State::Failed,
        }
    }

    fn end_value(&mut self) {
        self.wanted = false;
        self.state = match self.stack.is_empty() {
            true => State::Done,
            false => State::After,
        };
    }

    fn end_number(&mut self) {
        if self.wanted {
            self.found = whole_number(self.digits.as_slice());
        }
        self.end_value();
    }
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn is_number_byte(b: u8) -> bool {
    matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
}

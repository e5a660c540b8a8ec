//! [`EventReader`]: a server-sent event stream (`text/event-stream`, the WHATWG HTML standard's
//! "event stream interpretation") read as it streams past, each event's data handed to a
//! [`PathScanner`] as it comes, so no event is held whole. Lines end in CRLF, LF or CR (a chunk
//! may end between CR and LF); a `data` field's value (one leading space dropped) joins the
//! event's data, lines of one event joined by LF; a blank line dispatches the event; comments
//! (`:`) and other fields are skipped; an event cut off by the stream's end is not dispatched.
//! The cost is the member read from the last event whose data carries it.
//!
//! An event's data is held (a copy: the bytes go on to the client meanwhile) up to
//! [`HELD_EVENT_BYTES`], and read only when a [`NameSighting`] says it may carry the member: in a
//! chat completion stream one event of 20 does. A longer event is read as it streams, from the
//! bytes held on. An event that one chunk holds whole (one `data` line and the blank line after
//! it, as an API sends its events) is looked at where it lies, without the copy.

use std::sync::Arc;

use memchr::memchr2;

use super::json::{NameSighting, PathScanner};

/// Data bytes of one event held before it is read; a longer event is read as it comes.
pub const HELD_EVENT_BYTES: usize = 4096;
/// Room the held data starts with: a chat completion chunk fits, so the buffer is allocated
/// once per answer instead of growing through its small sizes.
const HELD_AT_FIRST: usize = 512;

/// The path an `sse:` source reads in each event's data, with its [`NameSighting`], made once
/// when the route is read (two are equal when their paths are).
#[derive(Debug, Clone)]
pub struct EventPath {
    steps: Arc<[String]>,
    sighting: Arc<NameSighting>,
}

impl EventPath {
    /// The path of member names (or array indexes) `steps`.
    pub fn new(steps: Arc<[String]>) -> EventPath {
        let sighting = Arc::new(NameSighting::new(&steps));
        EventPath { steps, sighting }
    }

    /// Its steps, from the top.
    pub fn steps(&self) -> &Arc<[String]> {
        &self.steps
    }
}

impl PartialEq for EventPath {
    fn eq(&self, other: &EventPath) -> bool {
        self.steps == other.steps
    }
}

impl Eq for EventPath {}

impl std::hash::Hash for EventPath {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.steps.hash(state);
    }
}

/// Where the reader is in a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    /// At a line's first byte.
    Start,
    /// In a field's name: its first bytes (enough to know `data`).
    Name,
    /// Right after `data:`: a space here is dropped.
    DataColon,
    /// In a `data` field's value.
    Data,
    /// In a line that is skipped (a comment, another field).
    Skip,
}

/// Reads the last event of a stream that states a whole number at a path.
#[derive(Debug, Clone)]
pub struct EventReader {
    scanner: PathScanner,
    sighting: Arc<NameSighting>,
    /// The current event's data so far, while it is within [`HELD_EVENT_BYTES`].
    held: Vec<u8>,
    /// The current event outgrew `held`: its data goes to the scanner as it comes.
    streaming: bool,
    line: Line,
    /// The last byte was a CR: a LF now ends nothing more.
    after_cr: bool,
    name: [u8; 5],
    name_len: usize,
    /// Data lines of the current event so far.
    data_lines: usize,
    /// Data bytes of the current event so far; past `max_event` it is not read.
    event_bytes: usize,
    max_event: usize,
    /// Nothing read yet (a byte order mark there is dropped).
    at_start: bool,
    found: Option<u64>,
}

impl EventReader {
    /// A reader of `path` in each event's data (JSON), reading at most `max_event` bytes of
    /// one event.
    pub fn new(path: &EventPath, max_event: usize) -> EventReader {
        EventReader {
            sighting: path.sighting.clone(),
            scanner: PathScanner::new(path.steps.clone()),
            held: Vec::with_capacity(HELD_AT_FIRST),
            streaming: false,
            line: Line::Start,
            after_cr: false,
            name: [0; 5],
            name_len: 0,
            data_lines: 0,
            event_bytes: 0,
            max_event,
            at_start: true,
            found: None,
        }
    }

    /// Reads the next bytes of the stream.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        if self.at_start && !bytes.is_empty() {
            self.at_start = false;
            bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        }
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    i += 1;
                    continue;
                }
            }
            if b == b'\r' || b == b'\n' {
                self.end_line();
                self.after_cr = b == b'\r';
                i += 1;
                continue;
            }
            match self.line {
                Line::Start => {
                    // the usual event at once: one `data` line and a blank line, whole here
                    if self.data_lines == 0 {
                        if let Some(used) = self.whole_event(&bytes[i..]) {
                            i += used;
                            continue;
                        }
                    }
                    // the usual line at once: a `data` field
                    if bytes[i..].starts_with(b"data:") {
                        self.line = Line::DataColon;
                        i += b"data:".len();
                        continue;
                    }
                    self.name_byte(b);
                }
                Line::Name => self.name_byte(b),
                Line::DataColon => {
                    self.line = Line::Data;
                    self.begin_data_line();
                    if b != b' ' {
                        continue;
                    }
                }
                Line::Data => {
                    let end = memchr2(b'\r', b'\n', &bytes[i..]).map_or(bytes.len(), |p| i + p);
                    self.data(&bytes[i..end]);
                    i = end;
                    continue;
                }
                Line::Skip => {
                    match memchr2(b'\r', b'\n', &bytes[i..]) {
                        Some(p) => i += p,
                        None => return,
                    }
                    continue;
                }
            }
            i += 1;
        }
    }

    /// A byte of a line's field name (or the `:` that starts a comment or ends the name).
    fn name_byte(&mut self, b: u8) {
        if self.line == Line::Start && b == b':' {
            self.line = Line::Skip;
            return;
        }
        self.line = Line::Name;
        if b == b':' {
            self.end_name();
        } else if self.name_len < self.name.len() {
            self.name[self.name_len] = b;
            self.name_len += 1;
        } else {
            self.line = Line::Skip;
        }
    }

    /// Reads an event that `rest`, at a line's start between events, holds whole: one `data`
    /// line ended by LF or CRLF, then a blank line of the same ending. Answers the bytes it
    /// used; `None` for anything else, which the byte-by-byte path reads. Its data is looked at
    /// where it lies, never held.
    fn whole_event(&mut self, rest: &[u8]) -> Option<usize> {
        let value = rest.strip_prefix(b"data:")?;
        let value = value.strip_prefix(b" ").unwrap_or(value);
        let end = memchr2(b'\r', b'\n', value)?;
        let ending = match &value[end..] {
            [b'\n', b'\n', ..] => 2,
            [b'\r', b'\n', b'\r', b'\n', ..] => 4,
            _ => return None,
        };
        let data = &value[..end];
        if data.len() <= self.max_event && self.sighting.may_hold(data) {
            self.scanner.feed(data);
            if let Some(n) = self.scanner.finish() {
                self.found = Some(n);
            }
            self.scanner.reset();
        }
        Some(rest.len() - value.len() + end + ending)
    }

    /// The cost the last event carrying the path stated (events cut off by the end of the
    /// stream are not read).
    pub fn finish(self) -> Option<u64> {
        self.found
    }

    /// A `:` after a field name: a `data` field's value follows, anything else is skipped.
    fn end_name(&mut self) {
        self.line = match &self.name[..self.name_len] {
            b"data" => Line::DataColon,
            _ => Line::Skip,
        };
    }

    /// A line ended.
    fn end_line(&mut self) {
        match self.line {
            Line::Start => self.dispatch(),
            // `data` alone on a line is a data line with an empty value
            Line::Name if &self.name[..self.name_len] == b"data" => self.begin_data_line(),
            Line::DataColon => self.begin_data_line(),
            _ => {}
        }
        self.line = Line::Start;
        self.name_len = 0;
    }

    /// A data line starts: lines of one event are joined by LF.
    fn begin_data_line(&mut self) {
        if self.data_lines > 0 {
            self.data(b"\n");
        }
        self.data_lines += 1;
    }

    /// Bytes of the event's data: held while it is short, read as they come once it is not.
    fn data(&mut self, bytes: &[u8]) {
        self.event_bytes += bytes.len();
        if self.event_bytes > self.max_event {
            return;
        }
        if self.streaming {
            self.scanner.feed(bytes);
        } else if self.event_bytes <= HELD_EVENT_BYTES {
            self.held.extend_from_slice(bytes);
        } else {
            self.streaming = true;
            self.scanner.feed(&self.held);
            self.scanner.feed(bytes);
        }
    }

    /// A blank line: the event's data, if any, is read (a short event only when it may carry
    /// the member).
    fn dispatch(&mut self) {
        if self.data_lines > 0 && self.event_bytes <= self.max_event {
            if !self.streaming && self.sighting.may_hold(&self.held) {
                self.scanner.feed(&self.held);
            }
            if let Some(n) = self.scanner.finish() {
                self.found = Some(n);
            }
        }
        self.scanner.reset();
        self.held.clear();
        self.streaming = false;
        self.data_lines = 0;
        self.event_bytes = 0;
    }
}

//! How a log line's fields are written: exactly as `tracing-subscriber`'s default text format
//! writes them, without its per-field styling machinery where no styling applies.
//!
//! The default field formatter writes every field as `name=value` through three layers of
//! formatting (an ANSI style painted around the name even when the output has no colours, the
//! `=`, the value's `Debug`). An access line has eleven fields, and formatting them that way
//! cost more than the rest of a proxied request. [`PlainFields`] writes a field whose text
//! is known (a string of plain characters, an integer, a boolean, a value's `Debug`) directly,
//! and hands everything else (the message, an error with its sources, a raw identifier, any
//! field of a coloured output) to the default visitor, so every line reads as before.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{RecordFields, VisitOutput};
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};
use tracing_subscriber::fmt::FormatFields;

/// The text format's field formatter (see the module docs).
#[derive(Debug, Default, Clone, Copy)]
pub struct PlainFields;

impl<'writer> FormatFields<'writer> for PlainFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = PlainVisitor {
            writer,
            empty: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

/// Writes one event's or span's fields, separated by spaces.
struct PlainVisitor<'a> {
    writer: Writer<'a>,
    /// No field written yet (the first one takes no leading space).
    empty: bool,
    result: fmt::Result,
}

impl PlainVisitor<'_> {
    /// The field's name when this visitor writes it as `name=value` itself: not the message,
    /// not a raw identifier (`r#type`, written without its `r#`), not the `log.` metadata the
    /// default visitor skips, and only on a writer without colours.
    fn plain_name(&self, field: &Field) -> Option<&'static str> {
        let name = field.name();
        let special = name == "message" || name.starts_with("r#") || name.starts_with("log.");
        (!special && !self.writer.has_ansi_escapes()).then_some(name)
    }

    /// The space before every field but the first.
    fn pad(&mut self) -> fmt::Result {
        if self.empty {
            self.empty = false;
            Ok(())
        } else {
            self.writer.write_char(' ')
        }
    }

    /// Writes `name=` then the value.
    fn write(&mut self, name: &str, value: impl FnOnce(&mut Writer<'_>) -> fmt::Result) {
        if self.result.is_err() {
            return;
        }
        self.result = self
            .pad()
            .and_then(|()| self.writer.write_str(name))
            .and_then(|()| self.writer.write_char('='))
            .and_then(|()| value(&mut self.writer));
    }

    /// A field this visitor does not write itself: the default visitor writes it, after the
    /// space this one owes it (it skips `log.` fields whole).
    fn default(&mut self, field: &Field, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        if self.result.is_err() || field.name().starts_with("log.") {
            return;
        }
        self.result = self.pad();
        if self.result.is_ok() {
            let mut visitor = DefaultVisitor::new(self.writer.by_ref(), true);
            record(&mut visitor);
            self.result = visitor.finish();
        }
    }
}

/// Whether `value`'s `Debug` is itself in quotes: printable ASCII without `"` and `\`.
fn quotes_alone(value: &str) -> bool {
    value
        .bytes()
        .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
}

impl Visit for PlainVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        match self.plain_name(field) {
            Some(name) if quotes_alone(value) => self.write(name, |w| {
                w.write_char('"')?;
                w.write_str(value)?;
                w.write_char('"')
            }),
            _ => self.default(field, |v| v.record_str(field, value)),
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match self.plain_name(field) {
            Some(name) => self.write(name, |w| w.write_str(itoa::Buffer::new().format(value))),
            None => self.default(field, |v| v.record_u64(field, value)),
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        match self.plain_name(field) {
            Some(name) => self.write(name, |w| w.write_str(itoa::Buffer::new().format(value))),
            None => self.default(field, |v| v.record_i64(field, value)),
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        match self.plain_name(field) {
            Some(name) => self.write(name, |w| w.write_str(if value { "true" } else { "false" })),
            None => self.default(field, |v| v.record_bool(field, value)),
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.default(field, |v| v.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match self.plain_name(field) {
            Some(name) => self.write(name, |w| write!(w, "{value:?}")),
            None => self.default(field, |v| v.record_debug(field, value)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    /// Everything a subscriber writes, kept.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Captured {
            self.clone()
        }
    }

    #[derive(Debug)]
    struct Outer(std::io::Error);
    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("outer failed")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    /// Events of every kind of field, each written by `subscriber`.
    fn lines(plain: bool, ansi: bool) -> String {
        let out = Captured::default();
        let builder = tracing_subscriber::fmt()
            .with_writer(out.clone())
            .with_ansi(ansi)
            .without_time();
        let emit = || {
            let error = Outer(io::Error::other("inner refused"));
            let odd = "quote \" back \\ tab \t nl \n esc \u{1b}[31m é 日本 \u{200b} \u{7f}";
            tracing::info!(
                target: "slidegate::access",
                request_id = %"0123abcd",
                route = "otp",
                path = "/api/otp?phone=%2B62",
                status = 429u16,
                signed = -17i64,
                flag = true,
                ratio = 0.25f64,
                empty = "",
                quoted = "say \"hi\" \\ there",
                odd,
                listed = ?["a", "b"],
                r#type = "raw",
                "request"
            );
            tracing::warn!(
                error = &error as &(dyn std::error::Error + 'static),
                "store {}",
                "down"
            );
            tracing::info!(odd, "message with \"quotes\" and \u{1b}[1m escapes");
            tracing::info!(message = "only a message");
            let span = tracing::info_span!("conn", peer = "10.0.0.1", port = 443u16);
            span.in_scope(|| tracing::info!(n = 1u64, "inside"));
        };
        if plain {
            tracing::subscriber::with_default(builder.fmt_fields(PlainFields).finish(), emit);
        } else {
            tracing::subscriber::with_default(builder.finish(), emit);
        }
        let bytes = out.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn lines_read_as_the_default_formats() {
        for ansi in [false, true] {
            let ours = lines(true, ansi);
            assert_eq!(ours, lines(false, ansi), "ansi {ansi}");
            assert_eq!(ours.lines().count(), 5, "{ours}");
        }
        let plain = lines(true, false);
        assert!(plain.contains(" route=\"otp\" "), "{plain}");
        assert!(
            plain.contains(" status=429 signed=-17 flag=true ratio=0.25 "),
            "{plain}"
        );
        assert!(
            plain.contains(" listed=[\"a\", \"b\"] type=\"raw\"\n"),
            "{plain}"
        );
    }
}

//! [`CostReader`]: the cost one answer's body states, read chunk by chunk as the body streams
//! to its client. `json:` reads the body as one JSON document, up to the route's
//! `max_cost_body_bytes` (a longer body states what its first that many bytes stated, whole:
//! the last copy of the member there; nothing when there was none); `sse:` reads the events of a
//! `text/event-stream` answer (each event up to that bound), and any other answer as `json:`
//! does, so one route serves streamed and whole answers alike. A body with a
//! `Content-Encoding` (other than `identity`) cannot be read as it passes and states nothing.

use http::header::{CONTENT_ENCODING, CONTENT_TYPE};
use http::HeaderMap;

use super::json::PathScanner;
use super::sources::CostFrom;
use super::sse::EventReader;

/// Reads the cost an answer's body states.
#[derive(Debug, Clone)]
pub struct CostReader {
    form: Form,
}

#[derive(Debug, Clone)]
enum Form {
    /// One JSON document: the scanner, bytes read, the bound.
    Document(PathScanner, usize, usize),
    /// An event stream.
    Events(EventReader),
    /// A document past its bound: what its bytes within the bound stated.
    Capped(Option<u64>),
    /// A body that states nothing (compressed, or not JSON).
    Unreadable,
}

impl CostReader {
    /// The reader of `from` for an answer with these headers; `None` for a header source,
    /// which the head states.
    pub fn new(from: &CostFrom, headers: &HeaderMap, max_bytes: usize) -> Option<CostReader> {
        let compressed = headers
            .get(CONTENT_ENCODING)
            .is_some_and(|e| !e.as_bytes().eq_ignore_ascii_case(b"identity"));
        let form = match from {
            CostFrom::Header(_) => return None,
            _ if compressed => Form::Unreadable,
            CostFrom::Sse(path) if is_event_stream(headers) => {
                Form::Events(EventReader::new(path, max_bytes))
            }
            CostFrom::Sse(path) => {
                Form::Document(PathScanner::new(path.steps().clone()), 0, max_bytes)
            }
            CostFrom::Json(path) => Form::Document(PathScanner::new(path.clone()), 0, max_bytes),
        };
        Some(CostReader { form })
    }

    /// Reads the next chunk of the body.
    pub fn feed(&mut self, bytes: &[u8]) {
        match &mut self.form {
            Form::Document(scanner, read, max) => {
                let within = (*max - *read).min(bytes.len());
                *read += within;
                scanner.feed(&bytes[..within]);
                if scanner.failed() {
                    self.form = Form::Unreadable;
                } else if within < bytes.len() {
                    self.form = Form::Capped(scanner.found_so_far());
                }
            }
            Form::Events(events) => events.feed(bytes),
            Form::Capped(_) | Form::Unreadable => {}
        }
    }

    /// Whether nothing the body still sends can state a cost (a document past its bound or
    /// not JSON): a body whose client left need not be read on.
    pub fn hopeless(&self) -> bool {
        match &self.form {
            Form::Document(scanner, _, _) => scanner.failed(),
            Form::Events(_) => false,
            Form::Capped(_) | Form::Unreadable => true,
        }
    }

    /// The cost the whole body stated, if it stated one.
    pub fn finish(self) -> Option<u64> {
        match self.form {
            Form::Document(mut scanner, _, _) => scanner.finish(),
            Form::Events(events) => events.finish(),
            Form::Capped(found) => found,
            Form::Unreadable => None,
        }
    }
}

/// The cost a response header states: a whole number, alone.
pub fn from_header(from: &CostFrom, headers: &HeaderMap) -> Option<u64> {
    let CostFrom::Header(name) = from else {
        return None;
    };
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        // two copies: which one the client reads is anyone's guess
        return None;
    }
    super::number::whole_number(value.as_bytes().trim_ascii())
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("text/event-stream"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn sse_reads_events_or_a_whole_json_answer() {
        let from = CostFrom::parse("sse:usage.total_tokens").unwrap();
        let stream = headers(&[("content-type", "text/event-stream; charset=utf-8")]);
        let mut r = CostReader::new(&from, &stream, 1 << 20).unwrap();
        r.feed(b"data: {\"usage\":{\"total_tokens\":4}}\n\n");
        assert_eq!(r.finish(), Some(4));
        let json = headers(&[("content-type", "application/json")]);
        let mut r = CostReader::new(&from, &json, 1 << 20).unwrap();
        r.feed(b"{\"usage\":{\"total_tokens\":40}}");
        assert_eq!(r.finish(), Some(40));
    }

    #[test]
    fn a_body_past_its_bound_states_what_it_stated_within_or_compressed_nothing() {
        let from = CostFrom::parse("json:n").unwrap();
        // stated within the bound (8 bytes), then more: the cost stands
        let mut r = CostReader::new(&from, &HeaderMap::new(), 8).unwrap();
        r.feed(b"{\"n\":1,");
        r.feed(b"\"m\":2}");
        assert!(r.hopeless());
        assert_eq!(r.finish(), Some(1));
        // one chunk across the bound: the same
        let mut r = CostReader::new(&from, &HeaderMap::new(), 8).unwrap();
        r.feed(b"{\"n\":12,\"m\":2}");
        assert_eq!(r.finish(), Some(12));
        // a number the bound cuts could go on (`12` of `123`): nothing
        let mut r = CostReader::new(&from, &HeaderMap::new(), 7).unwrap();
        r.feed(b"{\"n\":123}");
        assert_eq!(r.finish(), None);
        // stated past the bound: nothing
        let mut r = CostReader::new(&from, &HeaderMap::new(), 8).unwrap();
        r.feed(b"{\"m\":2,\"n\":1}");
        assert_eq!(r.finish(), None);
        // a later copy begun within the bound replaces the earlier one, though cut
        let mut r = CostReader::new(&from, &HeaderMap::new(), 12).unwrap();
        r.feed(b"{\"n\":1,\"n\":23}");
        assert_eq!(r.finish(), None);
        let gz = headers(&[("content-encoding", "gzip")]);
        let mut r = CostReader::new(&from, &gz, 1 << 20).unwrap();
        r.feed(b"{\"n\":1}");
        assert_eq!(r.finish(), None);
    }

    #[test]
    fn a_header_states_one_whole_number() {
        let from = CostFrom::parse("header:x-usage").unwrap();
        assert!(CostReader::new(&from, &HeaderMap::new(), 1).is_none());
        assert_eq!(
            from_header(&from, &headers(&[("x-usage", " 12 ")])),
            Some(12)
        );
        assert_eq!(from_header(&from, &headers(&[("x-usage", "1.5")])), None);
        let twice = headers(&[("x-usage", "1"), ("x-usage", "2")]);
        assert_eq!(from_header(&from, &twice), None);
    }
}

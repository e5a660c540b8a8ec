//! Tests of [`super::sse::EventReader`]: every way lines end, events split across chunks at
//! every position, events whole in one chunk against the same read byte by byte, long and
//! escaped events.

use super::sse::{EventPath, EventReader, HELD_EVENT_BYTES};

fn reader() -> EventReader {
    let path: Vec<String> = vec!["usage".into(), "total_tokens".into()];
    EventReader::new(&EventPath::new(path.into()), 1 << 20)
}

fn read(chunks: &[&[u8]]) -> Option<u64> {
    let mut r = reader();
    for c in chunks {
        r.feed(c);
    }
    r.finish()
}

/// An answer as OpenAI streams it with `stream_options.include_usage`.
const STREAM: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n\
    : keep-alive\n\n\
    data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"total_tokens\":17}}\n\n\
    data: [DONE]\n\n";

#[test]
fn the_last_event_carrying_the_member_states_the_cost() {
    assert_eq!(read(&[STREAM.as_bytes()]), Some(17));
    let two = "data: {\"usage\":{\"total_tokens\":3}}\n\ndata: {\"usage\":{\"total_tokens\":4}}\n\ndata: {}\n\n";
    assert_eq!(read(&[two.as_bytes()]), Some(4));
    assert_eq!(read(&[b"data: {\"usage\":null}\n\n"]), None);
}

#[test]
fn lines_end_any_way_and_split_data_lines_join() {
    for text in [
        "data:{\"usage\":{\"total_tokens\":9}}\r\n\r\n",
        "data: {\"usage\":{\"total_tokens\":9}}\r\r",
        "\u{feff}event: done\nid: 3\ndata: {\"usage\":\ndata: {\"total_tokens\":9}}\n\n",
        "retry: 10\ndata\ndata: {\"usage\":{\"total_tokens\":9}}\n\n",
    ] {
        assert_eq!(read(&[text.as_bytes()]), Some(9), "{text:?}");
    }
}

#[test]
fn an_event_cut_off_by_the_end_or_too_long_states_nothing() {
    assert_eq!(read(&[b"data: {\"usage\":{\"total_tokens\":9}}\n"]), None);
    let path: Vec<String> = vec!["n".into()];
    let mut r = EventReader::new(&EventPath::new(path.into()), 8);
    r.feed(b"data: {\"n\":1}\n\ndata: {\"n\":22222}\n\n");
    assert_eq!(r.finish(), Some(1));
    assert_eq!(read(&[b"dat: {\"usage\":{\"total_tokens\":9}}\n\n"]), None);
    assert_eq!(
        read(&[b"datas: {\"usage\":{\"total_tokens\":9}}\n\n"]),
        None
    );
}

#[test]
fn a_long_event_or_an_escaped_name_is_read_too() {
    let padding = "x".repeat(HELD_EVENT_BYTES);
    let long = format!("data: {{\"pad\":\"{padding}\",\"usage\":{{\"total_tokens\":8}}}}\n\n");
    let bytes = long.as_bytes();
    for cut in [
        10,
        HELD_EVENT_BYTES - 3,
        HELD_EVENT_BYTES + 9,
        bytes.len() - 5,
    ] {
        let (a, b) = bytes.split_at(cut);
        assert_eq!(read(&[a, b]), Some(8), "cut at {cut}");
    }
    let escaped = b"data: {\"usage\":{\"total\\u005ftokens\":6}}\n\n";
    assert_eq!(read(&[escaped]), Some(6));
}

#[test]
fn events_whole_in_a_chunk_read_as_events_read_byte_by_byte() {
    let events = [
        ("data: {\"usage\":{\"total_tokens\":3}}\r\n\r\n", 3),
        (
            "event: x\ndata: {\"usage\":\ndata: {\"total_tokens\":5}}\n\n",
            5,
        ),
        ("data: {\"usage\":{\"total_tokens\":7}}\r\r", 7),
        ("data: {\"usage\":{\"total_tokens\":9}}\n\n", 9),
        ("data: {\"usage\":null}\n\n", 9),
    ];
    let mut stream = String::new();
    for (event, last) in events {
        stream.push_str(event);
        let bytes = stream.as_bytes();
        let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(read(&bytewise), Some(last), "{stream:?}");
        assert_eq!(read(&[bytes]), Some(last), "{stream:?}");
        for cut in 0..=bytes.len() {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(read(&[a, b]), Some(last), "cut at {cut} of {stream:?}");
        }
    }
}

#[test]
fn a_stream_split_at_every_position_reads_as_the_whole() {
    let text = STREAM.replace('\n', "\r\n");
    for stream in [STREAM, text.as_str()] {
        let bytes = stream.as_bytes();
        for cut in 0..=bytes.len() {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(read(&[a, b]), Some(17), "cut at {cut} of {stream:?}");
        }
        let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(read(&bytewise), Some(17));
    }
}

//! [`JoinedBody`]: an upstream's answer whose small chunks that are ready together go on to the
//! client as one.
//!
//! A streamed answer (server-sent events, a chunked JSON stream) often reaches the gateway as
//! many small chunks read in one go. hyper writes each chunk it is handed as one chunk of its
//! own (its size line, the bytes, a CRLF) and sends at most 16 of them to the socket at a time,
//! so an answer of 20 events costs a chunk's bookkeeping 20 times and two writes. Joined, the
//! events that arrived together cost one chunk and one write. Only what the upstream has
//! already sent is joined: the body never waits for more, so no byte reaches the client later
//! than it would have; a chunk of [`JOINED_BELOW`] bytes or more (a download's) goes on as it
//! came, never copied.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};

/// A chunk this long or longer goes on alone, as it came.
pub const JOINED_BELOW: usize = 4096;
/// The most bytes one joined chunk holds.
pub const JOINED_MAX: usize = 16 * 1024;
/// The most chunks joined into one (empty chunks join too, and must not keep a poll going).
pub const JOINED_CHUNKS: usize = 128;

/// What a poll of the inner body gave.
type Polled<E> = Option<Result<Frame<Bytes>, E>>;

/// A body whose small data frames that are ready at once are handed on as one.
pub struct JoinedBody<B: Body> {
    inner: B,
    /// A frame read while joining that did not join (a chunk past the bound, trailers, an
    /// error, the end): the next poll starts from it.
    held: Option<Polled<B::Error>>,
}

impl<B: Body> JoinedBody<B> {
    /// `inner`, its ready small chunks joined.
    pub fn new(inner: B) -> JoinedBody<B> {
        JoinedBody { inner, held: None }
    }
}

impl<B> Body for JoinedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let first = match this.held.take() {
            Some(held) => held,
            None => std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)),
        };
        let data = match first {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                Err(frame) => return Poll::Ready(Some(Ok(frame))),
            },
            other => return Poll::Ready(other),
        };
        if data.len() >= JOINED_BELOW {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        // the join looks at the end itself: a body that has ended joins nothing
        Poll::Ready(Some(Ok(Frame::data(this.join_ready(data, cx)))))
    }

    fn is_end_stream(&self) -> bool {
        match &self.held {
            Some(None) => true,
            Some(Some(_)) => false,
            None => self.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        let held = match &self.held {
            Some(Some(Ok(frame))) => frame.data_ref().map_or(0, |d| d.len() as u64),
            _ => 0,
        };
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + held);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + held);
        }
        hint
    }
}

impl<B> JoinedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Unpin,
{
    /// `first` and the small chunks that follow it at once, up to [`JOINED_MAX`] bytes and
    /// [`JOINED_CHUNKS`] chunks; the first frame that does not join is held for the next poll.
    fn join_ready(&mut self, first: Bytes, cx: &mut Context<'_>) -> Bytes {
        let mut joined: Option<BytesMut> = None;
        let mut len = first.len();
        for _ in 1..JOINED_CHUNKS {
            if self.inner.is_end_stream() {
                break;
            }
            let next = match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Pending => break,
                Poll::Ready(Some(Ok(frame))) => frame.into_data(),
                Poll::Ready(other) => {
                    self.held = Some(other);
                    break;
                }
            };
            match next {
                Ok(data) if data.len() < JOINED_BELOW && len + data.len() <= JOINED_MAX => {
                    len += data.len();
                    let buf = joined.get_or_insert_with(|| {
                        let mut buf = BytesMut::with_capacity(JOINED_MAX.min(len * 4));
                        buf.extend_from_slice(&first);
                        buf
                    });
                    buf.extend_from_slice(&data);
                }
                Ok(data) => {
                    self.held = Some(Some(Ok(Frame::data(data))));
                    break;
                }
                Err(trailers) => {
                    self.held = Some(Some(Ok(trailers)));
                    break;
                }
            }
        }
        joined.map_or(first, BytesMut::freeze)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// One step of a scripted body.
    enum Step {
        Data(Bytes),
        /// Nothing ready yet (the next step comes on the next poll).
        Pending,
        Trailers,
        Error,
    }

    /// A body that plays its steps, one per poll, and ends after the last.
    struct Script(VecDeque<Step>);

    impl Body for Script {
        type Data = Bytes;
        type Error = &'static str;

        fn poll_frame(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, &'static str>>> {
            Poll::Ready(match self.get_mut().0.pop_front() {
                None => None,
                Some(Step::Data(data)) => Some(Ok(Frame::data(data))),
                Some(Step::Trailers) => Some(Ok(Frame::trailers(http::HeaderMap::new()))),
                Some(Step::Error) => Some(Err("broken")),
                Some(Step::Pending) => {
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
            })
        }

        fn is_end_stream(&self) -> bool {
            self.0.is_empty()
        }
    }

    fn data(bytes: &'static [u8]) -> Step {
        Step::Data(Bytes::from_static(bytes))
    }

    /// What each poll gave: data as text, `Pending`, `trailers`, `error`, `end`.
    fn polls(steps: Vec<Step>) -> Vec<String> {
        let mut body = JoinedBody::new(Script(steps.into()));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut seen = Vec::new();
        for _ in 0..100 {
            let said = match Pin::new(&mut body).poll_frame(&mut cx) {
                Poll::Pending => "Pending".to_string(),
                Poll::Ready(None) => "end".to_string(),
                Poll::Ready(Some(Err(_))) => "error".to_string(),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => String::from_utf8(data.to_vec()).unwrap(),
                    Err(_) => "trailers".to_string(),
                },
            };
            let done = said == "end" || said == "error";
            seen.push(said);
            if done {
                break;
            }
        }
        seen
    }

    #[test]
    fn small_chunks_ready_together_go_on_as_one() {
        let steps = vec![data(b"a"), data(b"b"), data(b"c")];
        assert_eq!(polls(steps), ["abc", "end"]);
    }

    #[test]
    fn a_chunk_not_yet_sent_is_never_waited_for() {
        // the joining met the pause: what came before it goes on at once
        let steps = vec![data(b"a"), data(b"b"), Step::Pending, data(b"c")];
        assert_eq!(polls(steps), ["ab", "c", "end"]);
        let steps = vec![
            Step::Pending,
            data(b"a"),
            Step::Pending,
            Step::Pending,
            data(b"b"),
        ];
        assert_eq!(polls(steps), ["Pending", "a", "Pending", "b", "end"]);
    }

    #[test]
    fn a_long_chunk_goes_on_alone_and_uncopied() {
        let long: &'static [u8] = Box::leak(vec![b'x'; JOINED_BELOW].into_boxed_slice());
        let mut body = JoinedBody::new(Script(vec![data(b"a"), data(long), data(b"b")].into()));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut next = || match Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => frame.into_data().unwrap(),
            _ => panic!("a data frame"),
        };
        assert_eq!(next(), "a");
        let passed = next();
        assert_eq!(passed.as_ptr(), long.as_ptr(), "the same bytes, not a copy");
        assert_eq!(next(), "b");
    }

    #[test]
    fn trailers_errors_and_the_end_come_after_the_joined_data() {
        let steps = vec![data(b"a"), data(b"b"), Step::Trailers];
        assert_eq!(polls(steps), ["ab", "trailers", "end"]);
        let steps = vec![data(b"a"), data(b"b"), Step::Error];
        assert_eq!(polls(steps), ["ab", "error"]);
    }

    #[test]
    fn a_joined_chunk_holds_at_most_its_bound() {
        let piece: &'static [u8] = Box::leak(vec![b'y'; JOINED_BELOW - 1].into_boxed_slice());
        let steps = (0..10).map(|_| data(piece)).collect();
        let seen = polls(steps);
        let sizes: Vec<usize> = seen[..seen.len() - 1].iter().map(String::len).collect();
        assert!(sizes.iter().all(|&n| n <= JOINED_MAX), "{sizes:?}");
        assert_eq!(sizes.iter().sum::<usize>(), 10 * (JOINED_BELOW - 1));
        assert_eq!(sizes.len(), 3, "{sizes:?}");
    }

    #[test]
    fn a_joined_chunk_holds_at_most_its_count_of_chunks() {
        let steps = (0..JOINED_CHUNKS + 2).map(|_| data(b"")).collect();
        let seen = polls(steps);
        assert_eq!(
            seen.len(),
            3,
            "two joined chunks, then the end: {}",
            seen.len()
        );
    }

    #[test]
    fn what_is_held_counts_in_the_end_and_the_size_left() {
        let long: &'static [u8] = Box::leak(vec![b'z'; JOINED_BELOW].into_boxed_slice());
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut body = JoinedBody::new(Script(vec![data(b"ab"), data(long)].into()));
        let _ = Pin::new(&mut body).poll_frame(&mut cx);
        assert!(!body.is_end_stream(), "the long chunk is still to come");
        assert_eq!(body.size_hint().lower(), JOINED_BELOW as u64);
        let mut body = JoinedBody::new(Script(vec![data(b"ab"), Step::Error].into()));
        let _ = Pin::new(&mut body).poll_frame(&mut cx);
        assert!(!body.is_end_stream(), "an error is still to come");
        let mut body = JoinedBody::new(Script(vec![data(b"ab"), data(b"cd")].into()));
        let _ = Pin::new(&mut body).poll_frame(&mut cx);
        assert!(body.is_end_stream());
    }
}

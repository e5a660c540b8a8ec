//! The lane's own connection to its node ([`Link`]): commands are written into one reused
//! buffer and straight onto the socket by the task that sends them, and replies are read by
//! whichever of that task's waiting futures ([`ReplyFuture`]) is polled, in the order the
//! commands went out. No task of its own, no channel: a reply reaches its caller in the poll
//! that reads it.
//!
//! Every command sent expects one reply, in order. A caller that stops waiting (its deadline
//! passed) leaves its place abandoned: the late reply is still read when it comes, and dropped,
//! so it is never taken for the next command's. A connection that fails (an I/O error, the
//! server closing it, bytes that are not RESP) answers everything still waiting with an I/O
//! error at once, and is closed; the dialer ([`super::direct_dial`]) opens a new one.

use std::collections::VecDeque;
use std::future::Future;
use std::io::ErrorKind as IoKind;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use fred::error::{Error as FredError, ErrorKind};
use fred::types::config::Server;
use tokio::net::TcpStream;
use tokio::sync::Notify;

use super::resp::{parse, Reply};

/// Bytes read at once at least.
const READ_CHUNK: usize = 16 * 1024;

/// One connection and the replies it still owes.
pub struct Link {
    state: Mutex<State>,
    /// Woken when the connection fails or is closed: the dialer opens a new one.
    pub dialer: Arc<Notify>,
}

#[derive(Default)]
struct State {
    /// `None` while disconnected (commands are then refused, never queued).
    stream: Option<TcpStream>,
    /// The server it is (or was last) connected to.
    server: Option<Server>,
    /// Whether it was ever connected.
    ever_connected: bool,
    /// When its last connection closed (`None` while connected, or never connected).
    down_since: Option<Instant>,
    /// Commands not yet written; `written` of its bytes are.
    out: Vec<u8>,
    written: usize,
    /// Bytes read and not yet parsed.
    input: Vec<u8>,
    /// Which command each coming reply answers, in order.
    expected: VecDeque<u64>,
    slots: Vec<(u64, Slot)>,
    next_id: u64,
}

enum Slot {
    /// Its caller waits (and is woken, when it registered, once the reply is in).
    Waiting(Option<Waker>),
    /// Its caller left: the reply is read and dropped.
    Abandoned,
    /// The reply (`Err`: the connection failed first).
    Ready(Result<Reply, FredError>),
}

/// The reply to one command sent on a [`Link`].
pub struct ReplyFuture {
    link: Arc<Link>,
    id: u64,
    done: bool,
}

impl Link {
    /// A link not connected yet; `dialer` is told whenever it needs a connection.
    pub fn new(dialer: Arc<Notify>) -> Link {
        Link {
            state: Mutex::default(),
            dialer,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The server it is connected to (`None`: disconnected).
    pub fn connected_to(&self) -> Option<Server> {
        let state = self.lock();
        state.stream.as_ref().and(state.server.clone())
    }

    /// Uses `stream`, connected and ready for commands, from now on.
    pub fn install(&self, stream: TcpStream, server: Server) {
        let mut state = self.lock();
        state.fail_all("replaced by a new connection");
        state.stream = Some(stream);
        state.server = Some(server);
        state.ever_connected = true;
        state.down_since = None;
    }

    /// How long it has been disconnected since its last connection closed (`None`: connected,
    /// or never connected).
    pub fn down_for(&self) -> Option<Duration> {
        self.lock().down_since.map(|since| since.elapsed())
    }

    /// Closes a connection the server closed (or wrote to unasked) while it owed no reply, so
    /// that the dialer opens a new one before a call finds it dead; whether it is connected.
    pub fn check_idle(&self) -> bool {
        let mut state = self.lock();
        if state.expected.is_empty() && state.closed_while_idle() {
            return false;
        }
        state.stream.is_some()
    }

    /// The server it was last connected to (`None`: never connected).
    pub fn last_server(&self) -> Option<Server> {
        let state = self.lock();
        state.ever_connected.then(|| state.server.clone()).flatten()
    }

    /// Closes the connection (what waits gets an I/O error) and asks the dialer for a new one.
    pub fn close(&self, why: &str) {
        self.lock().fail_all(why);
        self.dialer.notify_one();
    }

    /// Writes a command (or several: `replies` of them) that `write` appends to the buffer, and
    /// returns their replies to come, in order; `None` (nothing written) while disconnected or
    /// when `write` declines.
    pub fn submit(
        self: &Arc<Self>,
        replies: usize,
        write: impl FnOnce(&mut Vec<u8>) -> bool,
    ) -> Option<Vec<ReplyFuture>> {
        let mut state = self.lock();
        if state.expected.is_empty() && state.closed_while_idle() {
            drop(state);
            self.dialer.notify_one();
            return None;
        }
        state.stream.as_ref()?;
        let start = state.out.len();
        if !write(&mut state.out) {
            state.out.truncate(start);
            return None;
        }
        let mut futures = Vec::with_capacity(replies);
        for _ in 0..replies {
            let id = state.next_id;
            state.next_id += 1;
            state.expected.push_back(id);
            state.slots.push((id, Slot::Waiting(None)));
            futures.push(ReplyFuture {
                link: self.clone(),
                id,
                done: false,
            });
        }
        if state.flush(None).is_err() {
            drop(state);
            self.dialer.notify_one();
        }
        Some(futures)
    }
}

impl State {
    /// Writes what the buffer holds, as far as the socket takes it now; with `cx`, asks to be
    /// woken when it takes more. `Err`: the connection failed (and is closed).
    fn flush(&mut self, mut cx: Option<&mut Context<'_>>) -> Result<(), ()> {
        let Some(stream) = &self.stream else {
            return Err(());
        };
        while self.written < self.out.len() {
            match stream.try_write(&self.out[self.written..]) {
                Ok(0) => return self.fail("the connection took no bytes"),
                Ok(n) => self.written += n,
                Err(e) if e.kind() == IoKind::WouldBlock => {
                    let Some(cx) = cx.as_deref_mut() else {
                        return Ok(());
                    };
                    match stream.poll_write_ready(cx) {
                        Poll::Ready(Ok(())) => continue,
                        Poll::Ready(Err(e)) => return self.fail(&e.to_string()),
                        Poll::Pending => return Ok(()),
                    }
                }
                Err(e) => return self.fail(&e.to_string()),
            }
        }
        self.out.clear();
        self.written = 0;
        Ok(())
    }

    /// Whether a connection that owes no reply was closed by the server (or sent what nobody
    /// asked for) since it was last used: it is then closed here, before a call is written
    /// to it. A server that died while the lane was idle is noticed this way, cheaply (no
    /// system call unless the socket turned readable), and the call can take another path.
    fn closed_while_idle(&mut self) -> bool {
        let Some(stream) = &self.stream else {
            return false;
        };
        self.input.reserve(READ_CHUNK);
        match stream.try_read_buf(&mut self.input) {
            Err(e) if e.kind() == IoKind::WouldBlock => false,
            Ok(0) => self.fail("the server closed the connection").is_err(),
            Ok(_) => self.fail("a reply no command asked for").is_err(),
            Err(e) => self.fail(&e.to_string()).is_err(),
        }
    }

    /// Flushes, then reads and hands out replies until the one of `id` is in or the socket
    /// has nothing more (the task is then woken when it has).
    fn drive(&mut self, id: u64, cx: &mut Context<'_>) -> Result<(), ()> {
        self.flush(Some(cx))?;
        while !self.expected.is_empty() && self.ready(id).is_none() {
            let Some(stream) = &self.stream else {
                return Err(());
            };
            self.input.reserve(READ_CHUNK);
            match stream.try_read_buf(&mut self.input) {
                Ok(0) => return self.fail("the server closed the connection"),
                Ok(_) => self.hand_out()?,
                Err(e) if e.kind() == IoKind::WouldBlock => match stream.poll_read_ready(cx) {
                    Poll::Ready(Ok(())) => continue,
                    Poll::Ready(Err(e)) => return self.fail(&e.to_string()),
                    Poll::Pending => return Ok(()),
                },
                Err(e) => return self.fail(&e.to_string()),
            }
        }
        Ok(())
    }

    /// Parses every complete reply read and gives each to its command's slot.
    fn hand_out(&mut self) -> Result<(), ()> {
        let mut used = 0;
        loop {
            match parse(&self.input[used..]) {
                Ok(Some((reply, len))) => {
                    used += len;
                    let Some(id) = self.expected.pop_front() else {
                        return self.fail("a reply no command asked for");
                    };
                    self.fill(id, Ok(reply));
                }
                Ok(None) => break,
                Err(e) => return self.fail(&e.0),
            }
        }
        self.input.drain(..used);
        Ok(())
    }

    fn fill(&mut self, id: u64, reply: Result<Reply, FredError>) {
        let Some(at) = self.slots.iter().position(|(i, _)| *i == id) else {
            return;
        };
        match std::mem::replace(&mut self.slots[at].1, Slot::Ready(reply)) {
            Slot::Waiting(Some(waker)) => waker.wake(),
            Slot::Abandoned => {
                self.slots.swap_remove(at);
            }
            _ => {}
        }
    }

    fn ready(&self, id: u64) -> Option<usize> {
        self.slots
            .iter()
            .position(|(i, s)| *i == id && matches!(s, Slot::Ready(_)))
    }

    /// Closes the connection, answering everything still waiting with an I/O error.
    fn fail(&mut self, why: &str) -> Result<(), ()> {
        self.fail_all(why);
        Err(())
    }

    fn fail_all(&mut self, why: &str) {
        if self.stream.take().is_some() {
            tracing::debug!(server = ?self.server, why, "the lane's connection to Redis closed");
            self.down_since = Some(Instant::now());
        }
        self.out.clear();
        self.written = 0;
        self.input.clear();
        for id in std::mem::take(&mut self.expected) {
            let lost = FredError::new(ErrorKind::IO, format!("connection to Redis lost: {why}"));
            self.fill(id, Err(lost));
        }
    }

    /// Wakes every caller still waiting, so that one of them reads for all (the one the
    /// socket would have woken may have just left).
    fn wake_waiting(&mut self) {
        for (_, slot) in &mut self.slots {
            if let Slot::Waiting(waker) = slot {
                if let Some(waker) = waker.take() {
                    waker.wake();
                }
            }
        }
    }
}

impl Future for ReplyFuture {
    type Output = Result<Reply, FredError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut state = this.link.lock();
        if state.ready(this.id).is_none() && state.drive(this.id, cx).is_err() {
            this.link.dialer.notify_one();
        }
        if let Some(at) = state.ready(this.id) {
            let (_, Slot::Ready(reply)) = state.slots.swap_remove(at) else {
                unreachable!("ready() found a ready slot");
            };
            this.done = true;
            state.wake_waiting();
            return Poll::Ready(reply);
        }
        match state.slots.iter_mut().find(|(i, _)| *i == this.id) {
            Some((_, slot)) => *slot = Slot::Waiting(Some(cx.waker().clone())),
            None => {
                this.done = true;
                return Poll::Ready(Err(FredError::new(ErrorKind::IO, "reply lost")));
            }
        }
        Poll::Pending
    }
}

impl Drop for ReplyFuture {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut state = self.link.lock();
        if let Some(at) = state.slots.iter().position(|(i, _)| *i == self.id) {
            if matches!(state.slots[at].1, Slot::Waiting(_)) {
                state.slots[at].1 = Slot::Abandoned;
            } else {
                state.slots.swap_remove(at);
            }
        }
        state.wake_waiting();
    }
}

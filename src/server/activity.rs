//! What one connection is doing, shared by its socket, its service and its watchdog: requests
//! in flight, since when it has been idle, since when a request head has been arriving, and
//! whether the next bytes written start a message (where hyper's own refusals can only be).
//!
//! The watchdog ([`Activity::due`]) closes a connection whose request head takes longer than
//! `header_read_timeout`, one whose client has taken none of what the gateway writes for
//! `idle_timeout` (as NGINX's `send_timeout`: a client that stops reading a streamed answer must
//! not hold the connection, and the upstream's, for as long as it likes), and a connection with
//! no request in flight for `idle_timeout`
//! (HTTP/1.1 keep-alive, and HTTP/2 with no open stream). An HTTP/1 head is timed from its
//! first byte; an HTTP/2 connection's reads are not watched, so only its first request is
//! timed, from the connection's first bytes (a client that sends a preface, or half of one,
//! and then nothing holds a connection no longer than a slow HTTP/1 head does).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// One connection's activity.
pub struct Activity {
    started: Instant,
    in_flight: AtomicUsize,
    /// Microseconds from `started` when the connection last had nothing in flight.
    idle_since: AtomicU64,
    /// Microseconds from `started`, plus one, when a new request head began to arrive; 0: none.
    head_since: AtomicU64,
    /// A response body ended; the message is over once hyper has flushed it.
    response_done: AtomicBool,
    /// The next write starts a message that no request of ours answers.
    between_messages: AtomicBool,
    /// Microseconds from `started`, plus one, since when the client has taken nothing written
    /// (the socket's buffer full); 0: the last write went out.
    write_blocked_since: AtomicU64,
}

/// Why the watchdog acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Nothing yet; look again at this instant (`None`: a request is in flight).
    At(Option<Instant>),
    /// A request head took too long: close the connection.
    HeadTimeout,
    /// Idle for `idle_timeout`: shut it down gracefully.
    Idle,
    /// The client took nothing written for `idle_timeout`: close the connection.
    WriteStalled,
}

impl Activity {
    /// A connection that starts now, with `head_arriving` when its first bytes are already in.
    pub fn new(head_arriving: bool) -> Activity {
        Activity {
            started: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            head_since: AtomicU64::new(u64::from(head_arriving)),
            response_done: AtomicBool::new(false),
            between_messages: AtomicBool::new(true),
            write_blocked_since: AtomicU64::new(0),
        }
    }

    fn now_us(&self) -> u64 {
        self.started.elapsed().as_micros() as u64
    }

    /// Bytes arrived from the client.
    pub fn read(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0
            && self.head_since.load(Ordering::Acquire) == 0
        {
            self.head_since.store(self.now_us() + 1, Ordering::Release);
        }
    }

    /// A write to the client went out (`blocked` false) or found its buffer full.
    pub fn wrote(&self, blocked: bool) {
        let since = self.write_blocked_since.load(Ordering::Relaxed);
        match (blocked, since) {
            (true, 0) => self
                .write_blocked_since
                .store(self.now_us() + 1, Ordering::Relaxed),
            (false, 1..) => self.write_blocked_since.store(0, Ordering::Relaxed),
            _ => {}
        }
    }

    /// A request reached the service.
    pub fn begin(&self) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.head_since.store(0, Ordering::Release);
        self.between_messages.store(false, Ordering::Release);
    }

    /// A response ended (its body was dropped).
    pub fn end(&self) {
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle_since.store(self.now_us(), Ordering::Release);
            self.response_done.store(true, Ordering::Release);
        }
    }

    /// hyper flushed what it had written: after the last response, the next write starts a
    /// message.
    pub fn flushed(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0
            && self.response_done.swap(false, Ordering::AcqRel)
        {
            self.between_messages.store(true, Ordering::Release);
        }
    }

    /// Whether a write now starts a message no request of ours answers.
    pub fn between_messages(&self) -> bool {
        self.between_messages.load(Ordering::Acquire)
    }

    /// What the watchdog should do now: `http1` says whether a head in progress is all that
    /// counts (an HTTP/2 connection awaiting its first request is held to both bounds).
    pub fn due(&self, header_read_timeout: Duration, idle_timeout: Duration, http1: bool) -> Due {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            let blocked = self.write_blocked_since.load(Ordering::Relaxed);
            if blocked == 0 {
                return Due::At(None);
            }
            let end = blocked - 1 + idle_timeout.as_micros() as u64;
            return match self.now_us() >= end {
                true => Due::WriteStalled,
                false => Due::At(Some(self.started + Duration::from_micros(end))),
            };
        }
        let now = self.now_us();
        let at = |end: u64| Due::At(Some(self.started + Duration::from_micros(end)));
        let idle_end = self.idle_since.load(Ordering::Acquire) + idle_timeout.as_micros() as u64;
        let head = self.head_since.load(Ordering::Acquire);
        if head > 0 {
            let end = head - 1 + header_read_timeout.as_micros() as u64;
            return match (now >= end, http1, now >= idle_end) {
                (true, _, _) => Due::HeadTimeout,
                (false, true, _) => at(end),
                (false, false, true) => Due::Idle,
                (false, false, false) => at(end.min(idle_end)),
            };
        }
        if now >= idle_end {
            Due::Idle
        } else {
            at(idle_end)
        }
    }
}

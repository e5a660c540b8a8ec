//! A connection's watchdog: hyper's connection driven beside one timer, the drain and (HTTP/2)
//! the rapid-reset alarm. The three are polled only after one of them woke the task, not at
//! every wake of the connection: a request wakes the task several times (its head, the
//! upstream's answer, the flush), and polling them each time cost about 1,200 instructions a
//! request (bench/README, run 19).

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::sync::watch;

use super::activity::{Activity, Due};
use super::resets::StreamResets;

/// How long a connection told GOAWAY for rapid resets has to close before it is cut.
const RESET_CUT_GRACE: Duration = Duration::from_secs(1);

/// The bounds the watchdog enforces.
#[derive(Clone, Copy)]
pub struct Bounds {
    /// A request head must arrive within this.
    pub header_read_timeout: Duration,
    /// A connection with nothing in flight is shut down after this.
    pub idle_timeout: Duration,
}

/// The waker the watchdog's futures are polled with: it notes that one of them woke, then wakes
/// the connection's task.
#[derive(Default)]
struct Woken {
    /// One of the watchdog's futures woke since they were last polled.
    woke: AtomicBool,
    /// The connection's task.
    task: AtomicWaker,
}

impl Woken {
    /// Runs `poll` with `watchdog` (the waker made of this) when one of the watchdog's
    /// futures woke since the last run, or a run was noted; `None` otherwise. `task` is the
    /// waker to wake when one of them does.
    fn poll_woken<T>(
        &self,
        task: &Waker,
        watchdog: &Waker,
        poll: impl FnOnce(&mut Context<'_>) -> Poll<T>,
    ) -> Option<Poll<T>> {
        self.task.register(task);
        match self.woke.swap(false, Ordering::AcqRel) {
            true => Some(poll(&mut Context::from_waker(watchdog))),
            false => None,
        }
    }

    /// Notes that the watchdog's futures are to be polled at the next turn.
    fn note(&self) {
        self.woke.store(true, Ordering::Release);
    }
}

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.note();
        self.task.wake();
    }
}

/// What ended a turn of the watchdog.
enum Event<T> {
    /// The connection ended.
    Served(T),
    /// The client reset streams faster than it let them finish (HTTP/2).
    RapidResets,
    /// The drain began.
    Stopping,
    /// The timer fired.
    Timer,
}

/// Drives `conn` while watching it: a head past `header_read_timeout` closes it, as does a
/// client that took nothing written for `idle_timeout`; `idle_timeout` with nothing in flight or
/// the drain shut it down gracefully, and a connection still idle a
/// whole period after that (a client that ignores HTTP/2's GOAWAY and PING) is closed. HTTP/2
/// rapid resets (`resets` tripped) shut it down at once and close it [`RESET_CUT_GRACE`] later.
///
/// The watchdog is one timer, re-armed only when it fires: at the next instant `activity`
/// says something is due, and never more than `header_read_timeout` (or `idle_timeout`) ahead,
/// so a head that starts arriving while it sleeps is still cut on time without the socket
/// having to wake it. A wake of the connection costs the watchdog one waker registration: its
/// futures are polled only when one of them woke.
pub async fn watch<C: Future<Output = Result<(), hyper::Error>>>(
    conn: C,
    shut_down: impl Fn(Pin<&mut C>),
    activity: &Activity,
    resets: Option<&StreamResets>,
    bounds: Bounds,
    mut stopping: watch::Receiver<bool>,
) -> Result<(), hyper::Error> {
    // Heads are timed on both (an HTTP/2 connection's first request only), so the timer
    // wakes at the shorter bound; HTTP/2 ones also count stream resets.
    let http1 = resets.is_none();
    let period = bounds.header_read_timeout.min(bounds.idle_timeout);
    let mut conn = std::pin::pin!(conn);
    let mut timer = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
    let mut stop = std::pin::pin!(async move {
        let _ = stopping.wait_for(|stop| *stop).await;
    });
    let mut rapid = std::pin::pin!(async move {
        match resets {
            Some(resets) => resets.tripped().await,
            None => std::future::pending().await,
        }
    });
    let woken = Arc::new(Woken::default());
    let watchdog_waker = Waker::from(woken.clone());
    let (mut shutting, mut cutting) = (false, false);
    loop {
        // Every turn starts with the watchdog's futures polled: they are new, or one fired
        // and the timer was re-armed.
        woken.note();
        let event = poll_fn(|cx| {
            if let Poll::Ready(served) = conn.as_mut().poll(cx) {
                return Poll::Ready(Event::Served(served));
            }
            let watchdog = woken.poll_woken(cx.waker(), &watchdog_waker, |watchdog| {
                if !cutting && rapid.as_mut().poll(watchdog).is_ready() {
                    return Poll::Ready(Event::RapidResets);
                }
                if !shutting && stop.as_mut().poll(watchdog).is_ready() {
                    return Poll::Ready(Event::Stopping);
                }
                timer.as_mut().poll(watchdog).map(|()| Event::Timer)
            });
            watchdog.unwrap_or(Poll::Pending)
        })
        .await;
        match event {
            Event::Served(served) => return served,
            Event::RapidResets => {
                if !shutting {
                    shut_down(conn.as_mut());
                    shutting = true;
                }
                cutting = true;
                timer
                    .as_mut()
                    .reset(tokio::time::Instant::now() + RESET_CUT_GRACE);
            }
            Event::Stopping => {
                shut_down(conn.as_mut());
                shutting = true;
            }
            Event::Timer if cutting => return Ok(()),
            Event::Timer => {
                let now = tokio::time::Instant::now();
                let due = activity.due(bounds.header_read_timeout, bounds.idle_timeout, http1);
                let next = match due {
                    Due::HeadTimeout | Due::WriteStalled => return Ok(()),
                    Due::Idle if shutting => return Ok(()),
                    Due::Idle => {
                        shut_down(conn.as_mut());
                        shutting = true;
                        now + period
                    }
                    Due::At(Some(at)) => tokio::time::Instant::from_std(at).min(now + period),
                    Due::At(None) => now + period,
                };
                timer.as_mut().reset(next);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex;

    use super::*;

    /// A watchdog future is polled at the first turn, not again until it wakes, and at the
    /// turn after it woke.
    #[test]
    fn watchdog_futures_are_polled_only_after_one_woke() {
        let woken = Arc::new(Woken::default());
        let watchdog = Waker::from(woken.clone());
        let polls = AtomicUsize::new(0);
        let registered: Mutex<Option<Waker>> = Mutex::new(None);
        let poll = |cx: &mut Context<'_>| {
            polls.fetch_add(1, Ordering::Relaxed);
            *registered.lock().unwrap() = Some(cx.waker().clone());
            Poll::<()>::Pending
        };
        let turn = || woken.poll_woken(Waker::noop(), &watchdog, poll);
        woken.note();
        assert_eq!(turn(), Some(Poll::Pending));
        assert_eq!(polls.load(Ordering::Relaxed), 1);
        for _ in 0..10 {
            assert_eq!(
                turn(),
                None,
                "the connection woke the task, not the watchdog"
            );
        }
        assert_eq!(polls.load(Ordering::Relaxed), 1);
        registered.lock().unwrap().take().unwrap().wake();
        assert_eq!(turn(), Some(Poll::Pending));
        assert_eq!(polls.load(Ordering::Relaxed), 2);
        assert_eq!(turn(), None);
    }
}

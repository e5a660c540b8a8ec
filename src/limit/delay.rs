//! `on_exceed = "delay"`: a request over the limit waits (asleep, holding no thread) until the
//! store's exact wait has passed and asks again, as long as that ends within `max_delay` and
//! fewer than `max_waiting` requests of the route are already waiting; otherwise it is a 429.
//! If others took the room meanwhile, it waits again within the same deadline. [`Delay`] is the
//! wait of one request, a state of [`super::Deciding`].

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use prometheus::IntGauge;
use tokio::time::Sleep;

use super::policy::RoutePolicy;

/// One request's place in its route's waiting room, and its next wake-up.
pub struct Delay {
    deadline: Instant,
    _slot: WaitingSlot,
    sleep: Pin<Box<Sleep>>,
}

impl Delay {
    /// Starts waiting after a rejection whose wait is `first_wait`, when it ends within
    /// `max_delay` and the room has a place; `None` when the rejection stands.
    pub fn start(
        policy: &RoutePolicy,
        first_wait: Duration,
        max_delay: Duration,
        max_waiting: usize,
    ) -> Option<Delay> {
        let deadline = Instant::now() + max_delay;
        if Instant::now() + first_wait > deadline {
            return None;
        }
        let slot = WaitingSlot::take(
            policy.waiting.clone(),
            policy.metrics.delay_waiting.clone(),
            max_waiting,
        )?;
        Some(Delay {
            deadline,
            _slot: slot,
            sleep: Box::pin(tokio::time::sleep(first_wait)),
        })
    }

    /// Waits again after another rejection whose wait is `wait`, if it still ends within the
    /// deadline; `None` when the rejection stands.
    pub fn again(mut self, wait: Duration) -> Option<Delay> {
        let wake = Instant::now() + wait;
        if wake > self.deadline {
            return None;
        }
        self.sleep.as_mut().reset(wake.into());
        Some(self)
    }

    /// Ready once it is time to ask again.
    pub fn poll_sleep(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.sleep.as_mut().poll(cx)
    }
}

/// One place in a delay route's waiting room, given back on drop.
struct WaitingSlot {
    waiting: Arc<AtomicUsize>,
    gauge: IntGauge,
}

impl WaitingSlot {
    fn take(waiting: Arc<AtomicUsize>, gauge: IntGauge, max: usize) -> Option<WaitingSlot> {
        let before = waiting.fetch_add(1, Ordering::AcqRel);
        if before >= max {
            waiting.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        gauge.inc();
        Some(WaitingSlot { waiting, gauge })
    }
}

impl Drop for WaitingSlot {
    fn drop(&mut self) {
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        self.gauge.dec();
    }
}

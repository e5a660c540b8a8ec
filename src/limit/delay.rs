//! `on_exceed = "delay"`: a request over the limit waits (asleep, holding no thread) until the
//! store's exact wait has passed and asks again, as long as that ends within `max_delay` and
//! fewer than `max_waiting` requests of the route are already waiting; otherwise it is a 429.
//! If others took the room meanwhile, it waits again within the same deadline.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus::IntGauge;

use super::{Limiter, RoutePolicy, Verdict};
use crate::metrics::DecisionLabel;

/// Waits for room after the rejection `first`; returns the verdict to count: `delayed` once it
/// fits, else the last rejection (or a store failure met while asking again).
pub(super) async fn wait_for_room(
    limiter: &Arc<Limiter>,
    policy: &Arc<RoutePolicy>,
    key: &str,
    cost: u64,
    first: Verdict,
    max_delay: Duration,
    max_waiting: usize,
) -> Verdict {
    let deadline = Instant::now() + max_delay;
    let fits_in_time = |v: &Verdict| Instant::now() + v.retry_after() <= deadline;
    if !fits_in_time(&first) {
        return first;
    }
    let Some(_slot) =
        WaitingSlot::take(&policy.waiting, &policy.metrics.delay_waiting, max_waiting)
    else {
        return first;
    };
    let mut verdict = first;
    loop {
        if !fits_in_time(&verdict) {
            return verdict;
        }
        tokio::time::sleep(verdict.retry_after()).await;
        verdict = limiter.decide_one(policy, key, cost).await;
        match verdict.label {
            DecisionLabel::Allowed => {
                verdict.label = DecisionLabel::Delayed;
                return verdict;
            }
            DecisionLabel::Rejected => continue,
            _ => return verdict,
        }
    }
}

/// One place in a delay route's waiting room, given back on drop.
struct WaitingSlot<'a> {
    waiting: &'a AtomicUsize,
    gauge: &'a IntGauge,
}

impl<'a> WaitingSlot<'a> {
    fn take(waiting: &'a AtomicUsize, gauge: &'a IntGauge, max: usize) -> Option<WaitingSlot<'a>> {
        let before = waiting.fetch_add(1, Ordering::AcqRel);
        if before >= max {
            waiting.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        gauge.inc();
        Some(WaitingSlot { waiting, gauge })
    }
}

impl Drop for WaitingSlot<'_> {
    fn drop(&mut self) {
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        self.gauge.dec();
    }
}

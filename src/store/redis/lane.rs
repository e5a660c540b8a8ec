//! Coalesced decisions: everything for one Redis node goes through a [`Lane`], whose driver
//! task sends whatever is queued as one script call ([`super::call`]) and hands each waiting
//! request its part of the reply.
//!
//! Differences from a fixed batching window: nothing ever waits for company. A lane keeps
//! [`MAX_IN_FLIGHT`] call outstanding; a decision that finds the lane free is sent at once, alone
//! if need be, and decisions only queue while a call is out, so the batches grow with the load
//! and a lone request pays one round trip, as without coalescing. (Measured here: one call out
//! per lane gives larger batches and less CPU per decision, in the gateway and in Redis, than
//! two, for more throughput on both the hot-key and the many-keys load.) A batch's decisions
//! (`/v1/decisions`) are the exception: they fill whole calls whatever the timing, so a second
//! full call of them may go out while one is in flight ([`MAX_BATCH_IN_FLIGHT`]), and Redis
//! starts on it as soon as it finishes the first instead of idling for a round trip. Single
//! decisions (the proxy path) go ahead of a batch's, so a request waits at most for the calls in
//! flight, never for a whole batch. Settlements (refunds, resets) ride in the next call, ahead
//! of its decisions, so a refund rarely costs a call of its own. A dry run's decisions come
//! already cut into calls of their own ([`super::dry::calls`]), never mixed with charging ones.
//!
//! With `store.replica_acks`, a call counts as in flight until its reply, not until the
//! replicas acknowledged it: its allowed decisions wait for `WAIT` apart, and the next call goes
//! out on the same connection behind that `WAIT` (Redis runs it once the `WAIT` returns, in
//! order), so the wait no longer adds a round trip of the gateway to every call.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, oneshot};

use super::batch::{
    Batch, Pending, PendingSettlement, MAX_PER_CALL, MAX_SETTLEMENTS_PER_CALL, MAX_UNITS_PER_CALL,
};
use super::call::{Called, Caller, Target};
use super::direct::Direct;
use super::release::{MAX_KEPT, RETRY_AFTER};
use crate::store::StoreError;

/// Calls a lane keeps outstanding at once; decisions queue only while it is busy.
pub const MAX_IN_FLIGHT: usize = 1;
/// Calls outstanding at once when the extra ones are full calls of a batch's decisions.
pub const MAX_BATCH_IN_FLIGHT: usize = 2;
enum Job {
    One(Pending),
    Many(Vec<Pending>),
    Settle(PendingSettlement),
    Dry(Vec<Vec<Pending>>),
}

/// The queue of one node; its driver task runs until the store is dropped.
#[derive(Clone)]
pub struct Lane {
    jobs: mpsc::UnboundedSender<Job>,
}

impl Lane {
    /// Whether two handles feed the same driver.
    pub fn same(&self, other: &Lane) -> bool {
        self.jobs.same_channel(&other.jobs)
    }

    /// Starts the driver of a lane for `target`.
    pub fn start(caller: Arc<Caller>, target: Target) -> Lane {
        let (jobs, queue) = mpsc::unbounded_channel();
        let direct = caller.own_node(&target).and_then(Direct::start);
        tokio::spawn(drive(caller, target, direct.map(Arc::new), queue));
        Lane { jobs }
    }

    /// Queues one decision.
    pub fn submit(&self, pending: Pending) {
        self.send(Job::One(pending));
    }

    /// Queues many decisions at once, in order.
    pub fn submit_many(&self, pendings: Vec<Pending>) {
        self.send(Job::Many(pendings));
    }

    /// Queues a dry run's decisions, already cut into calls ([`super::dry::calls`]).
    pub fn submit_dry(&self, calls: Vec<Vec<Pending>>) {
        self.send(Job::Dry(calls));
    }

    /// Queues a settlement for the next call.
    pub fn settle(&self, settlement: PendingSettlement) {
        self.send(Job::Settle(settlement));
    }

    fn send(&self, job: Job) {
        if let Err(e) = self.jobs.send(job) {
            let mut batch = Batch::default();
            match e.0 {
                Job::One(p) => batch.decisions.push(p),
                Job::Many(v) => batch.decisions = v,
                Job::Settle(s) => batch.settlements.push(s),
                Job::Dry(calls) => batch.decisions = calls.into_iter().flatten().collect(),
            }
            batch.fail(StoreError::Other("decision lane stopped".into()));
        }
    }
}

/// The driver: takes what is queued and sends it while [`Queue::may_send`] allows, on the
/// lane's own connection (`direct`) when it has one.
async fn drive(
    caller: Arc<Caller>,
    target: Target,
    direct: Option<Arc<Direct>>,
    mut jobs: mpsc::UnboundedReceiver<Job>,
) {
    let mut queue = Queue::default();
    let mut in_flight = FuturesUnordered::new();
    let mut trailing = FuturesUnordered::new();
    let mut releasing = Releasing::new();
    let mut open = true;
    loop {
        while let Ok(job) = jobs.try_recv() {
            queue.push(job);
        }
        while queue.may_send(in_flight.len()) {
            let batch = queue.next_call();
            if batch.is_empty() {
                break;
            }
            let caller = caller.clone();
            let target = target.clone();
            let direct = direct.clone();
            in_flight.push(async move { caller.call(&target, direct.as_deref(), batch).await });
        }
        if !open && in_flight.is_empty() && queue.is_empty() && trailing.is_empty() {
            return;
        }
        tokio::select! {
            biased;
            Some(called) = in_flight.next(), if !in_flight.is_empty() => {
                let Called { trailing: running, releases } = called;
                trailing.extend(running);
                keep(&mut releasing, releases);
            }
            Some(releases) = trailing.next(), if !trailing.is_empty() => {
                keep(&mut releasing, releases);
            }
            Some(releases) = releasing.next(), if !releasing.is_empty() => {
                let room = MAX_KEPT.saturating_sub(queue.settlements.len());
                for release in releases.into_iter().take(room) {
                    queue.push(Job::Settle(release));
                }
            }
            job = jobs.recv(), if open => match job {
                Some(job) => queue.push(job),
                None => open = false,
            },
        }
    }
}

/// Releases on their way back to the lane's queue, each group after [`RETRY_AFTER`].
type Releasing = FuturesUnordered<Pin<Box<dyn Future<Output = Vec<PendingSettlement>> + Send>>>;

/// Sends `releases` (slots a failed call, or an unacknowledged one, may have left behind) back
/// to the lane's queue after [`RETRY_AFTER`].
fn keep(releasing: &mut Releasing, releases: Vec<PendingSettlement>) {
    if releases.is_empty() {
        return;
    }
    releasing.push(Box::pin(async move {
        tokio::time::sleep(RETRY_AFTER).await;
        releases
    }));
}

/// What waits for a call: single decisions (a request on the proxy path) go ahead of batches
/// (`/v1/decisions`), so a request never waits behind the thousands of decisions of a batch
/// queued before it, only for a call in flight; settlements go first of all. Each kind keeps its
/// arrival order, and a batch's decisions stay in its order. A dry run's calls go out whole,
/// after everything that charges.
#[derive(Default)]
struct Queue {
    settlements: VecDeque<PendingSettlement>,
    single: VecDeque<Pending>,
    batches: VecDeque<Pending>,
    dry: VecDeque<Vec<Pending>>,
}

impl Queue {
    fn push(&mut self, job: Job) {
        match job {
            Job::One(p) => self.single.push_back(p),
            Job::Many(v) => self.batches.extend(v),
            Job::Settle(s) => self.settlements.push_back(s),
            Job::Dry(calls) => self.dry.extend(calls),
        }
    }

    /// Whether another call may go out with `in_flight` calls outstanding: the first always; a
    /// second only when nothing but a batch's decisions waits and they fill a whole call.
    fn may_send(&self, in_flight: usize) -> bool {
        if self.is_empty() {
            return false;
        }
        in_flight < MAX_IN_FLIGHT
            || (in_flight < MAX_BATCH_IN_FLIGHT
                && self.single.is_empty()
                && self.settlements.is_empty()
                && self.batches.len() >= MAX_PER_CALL)
    }

    fn is_empty(&self) -> bool {
        self.charging_is_empty() && self.dry.is_empty()
    }

    fn charging_is_empty(&self) -> bool {
        self.single.is_empty() && self.batches.is_empty() && self.settlements.is_empty()
    }

    /// The next call: settlements, then up to [`MAX_PER_CALL`] decisions sharing one explicit
    /// instant (or none), single ones first. What already passed its deadline is answered with
    /// a timeout instead.
    fn next_call(&mut self) -> Batch {
        let mut batch = Batch::default();
        if self.charging_is_empty() {
            if let Some(mut decisions) = self.dry.pop_front() {
                decisions.retain_mut(|p| !answer_if_late(p));
                batch.decisions = decisions;
                batch.dry = true;
                return batch;
            }
        }
        while batch.settlements.len() < MAX_SETTLEMENTS_PER_CALL {
            let Some(s) = self.settlements.pop_front() else {
                break;
            };
            if s.deadline.passed() {
                let timeout = s.deadline.timeout();
                s.tell(Err(timeout));
                continue;
            }
            batch.settlements.push(s);
        }
        take_into(&mut batch.decisions, &mut self.single);
        take_into(&mut batch.decisions, &mut self.batches);
        batch
    }
}

/// Moves decisions from the front of `queue` into `batch` while they fit in it (by count, by
/// units, and sharing one explicit instant).
fn take_into(batch: &mut Vec<Pending>, queue: &mut VecDeque<Pending>) {
    let mut units: u64 = batch.iter().map(|p| p.cost).sum();
    while let Some(p) = queue.front() {
        let cost = p.cost;
        if batch.len() == MAX_PER_CALL
            || (!batch.is_empty() && units + cost > MAX_UNITS_PER_CALL)
            || batch
                .first()
                .is_some_and(|f: &Pending| f.fixed_now != p.fixed_now)
        {
            break;
        }
        units += cost;
        let mut p = queue.pop_front().expect("front exists");
        if !answer_if_late(&mut p) {
            batch.push(p);
        }
    }
}

/// Answers a decision whose deadline passed with a timeout (its sender is then spent); tells
/// whether it did.
fn answer_if_late(p: &mut Pending) -> bool {
    if !p.deadline.passed() {
        return false;
    }
    let (spent, _) = oneshot::channel();
    let reply = std::mem::replace(&mut p.reply, spent);
    let _ = reply.send(Err(p.deadline.timeout()));
    true
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::deadline::Deadline;
    use super::*;
    use crate::store::LimitSet;

    fn pending() -> Pending {
        Pending {
            limits: Arc::new(LimitSet::new(None, Vec::new(), Vec::new(), 1)),
            keys: Vec::new(),
            cost: 1,
            dry: false,
            receipt: false,
            fixed_now: None,
            deadline: Deadline::after(Duration::from_secs(60)),
            reply: oneshot::channel().0,
        }
    }

    #[test]
    fn large_charges_are_spread_over_calls_of_one_largest_charge_at_most() {
        let costly = |cost| Pending { cost, ..pending() };
        let mut queue = Queue::default();
        queue.push(Job::Many(vec![
            costly(10_000),
            costly(10_000),
            costly(6_000),
            costly(4_000),
            costly(1),
        ]));
        let calls: Vec<Vec<u64>> = (0..3)
            .map(|_| queue.next_call().decisions.iter().map(|p| p.cost).collect())
            .collect();
        assert_eq!(calls, [vec![10_000], vec![10_000], vec![6_000, 4_000]]);
        assert_eq!(queue.next_call().decisions.len(), 1);
    }

    #[test]
    fn a_second_call_goes_out_only_for_a_whole_call_of_batch_decisions() {
        let mut queue = Queue::default();
        assert!(!queue.may_send(0), "nothing queued, nothing to send");
        queue.push(Job::One(pending()));
        assert!(queue.may_send(0), "a lone request is sent at once");
        assert!(!queue.may_send(1), "a request waits for the call in flight");

        let mut queue = Queue::default();
        queue.push(Job::Many(
            (0..MAX_PER_CALL + 10).map(|_| pending()).collect(),
        ));
        assert!(
            queue.may_send(1),
            "a whole call of a batch goes out beside the one in flight"
        );
        assert!(!queue.may_send(MAX_BATCH_IN_FLIGHT));
        assert_eq!(queue.next_call().decisions.len(), MAX_PER_CALL);
        assert!(queue.may_send(0));
        assert!(!queue.may_send(1), "a batch's tail waits to fill a call");

        let mut queue = Queue::default();
        queue.push(Job::Many((0..MAX_PER_CALL).map(|_| pending()).collect()));
        queue.push(Job::One(pending()));
        assert!(
            !queue.may_send(1),
            "a waiting request keeps the lane to one call"
        );
    }
}

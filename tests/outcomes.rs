//! Counting outcomes (README, "Protecting OTP and login endpoints") at the store: an attempt is charged when admitted (a
//! reservation) and settled later: kept (and confirmed as answered) when its status counts or
//! never came, refunded when it does not count or the upstream never saw it, and a resetting
//! status forgives the answered attempts while the reservations still in flight stay. For
//! random traces of overlapping attempts and outcomes, on the memory store and on Redis (at
//! given instants, and on the Redis clock), every decision matches a plain model in which
//! reservations count until answered, and no window ever holds more than `limit` counted
//! attempts. `outcomes_through_the_layer` plays such traces through the rate-limit layer itself
//! with clients that leave at random moments.

mod support;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestRunner};
use slidegate::config::ClockSource;
use slidegate::store::{Decision, LimitSet, MemoryStore, Store};
use support::redis::RedisServer;
use support::store::{bases, limit_sets, redis_store, reserve, settle_first, Settle};
use support::unique_prefix;

const T0: u64 = 1_700_000_000_000_000;
const LIMIT: u64 = 3;
const WINDOW: u64 = 2_000_000;

#[path = "outcomes/through_the_layer.rs"]
mod through_the_layer;

/// What happens to an admitted attempt when it is settled.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Outcome {
    /// Its status counts: the charge stays, confirmed as answered.
    Counted,
    /// Its status does not count: refunded.
    Uncounted,
    /// Its status resets the count: its own charge and the answered ones go, the ones in
    /// flight stay.
    Reset,
    /// Its client left before the upstream saw it: refunded.
    Unseen,
    /// The upstream saw it but no status came: kept, confirmed as answered.
    NoStatus,
}

/// One step: after `gap` µs, a new attempt; and settle the oldest attempt in flight with
/// `outcome` when `settle` says so (attempts overlap: several may be in flight).
#[derive(Debug, Clone)]
struct Step {
    gap: u64,
    settle: Option<Outcome>,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let outcome = prop_oneof![
        3 => Just(Outcome::Counted),
        3 => Just(Outcome::Uncounted),
        1 => Just(Outcome::Reset),
        1 => Just(Outcome::Unseen),
        1 => Just(Outcome::NoStatus),
    ];
    let step = (0u64..700_000, proptest::option::weighted(0.7, outcome))
        .prop_map(|(gap, settle)| Step { gap, settle });
    proptest::collection::vec(step, 1..50)
}

/// The plain model: the attempts that count now, with their instants and whether they were
/// answered (kept) or are still in flight; a refund takes one out, a reset takes its own and
/// the answered ones; an attempt is admitted while fewer than `LIMIT` count in
/// `(now - WINDOW, now]`.
#[derive(Default)]
struct Model {
    /// (instant, attempt, answered)
    counting: Vec<(u64, u64, bool)>,
}

impl Model {
    fn in_window(&self, now: u64) -> usize {
        self.counting
            .iter()
            .filter(|(t, _, _)| now < t + WINDOW && *t <= now)
            .count()
    }

    fn admit(&mut self, id: u64, now: u64) -> bool {
        let fits = (self.in_window(now) as u64) < LIMIT;
        if fits {
            self.counting.push((now, id, false));
        }
        fits
    }

    fn settle(&mut self, id: u64, outcome: Outcome) {
        match outcome {
            Outcome::Counted | Outcome::NoStatus => {
                for entry in self.counting.iter_mut().filter(|e| e.1 == id) {
                    entry.2 = true;
                }
            }
            Outcome::Uncounted | Outcome::Unseen => self.counting.retain(|e| e.1 != id),
            Outcome::Reset => self.counting.retain(|e| e.1 != id && !e.2),
        }
    }
}

fn route() -> Arc<LimitSet> {
    limit_sets(
        "[[routes]]\nname = \"login\"\npath = \"/login\"\nupstream = \"up\"\n\
         [[routes.limits]]\nname = \"failed\"\nlimit = 3\nwindow = \"2s\"\n\
         count_status = [401]\nreset_status = [200]\n",
    )
    .remove(0)
}

/// What the gateway sends the store for an outcome.
async fn settle(
    store: &Store,
    set: &Arc<LimitSet>,
    bases: &[String],
    d: &Decision,
    outcome: Outcome,
) {
    // The limit resets, so a kept charge is confirmed.
    let settle = match outcome {
        Outcome::Counted | Outcome::NoStatus => Settle::Confirm,
        Outcome::Uncounted | Outcome::Unseen => Settle::Refund,
        Outcome::Reset => Settle::Reset,
    };
    settle_first(store, set, bases, d, settle).await;
}

/// Plays `steps` on `store` (at chosen instants when `clock` is false, else on the store's own
/// clock) and holds every decision to the model's.
async fn follows_the_model(
    store: &Store,
    steps: &[Step],
    chosen_instants: bool,
) -> Result<(), TestCaseError> {
    let set = route();
    let bases = bases(&unique_prefix("outcomes"), "login", "ann");
    let mut model = Model::default();
    let mut in_flight: VecDeque<(u64, Decision)> = VecDeque::new();
    let mut now = T0;
    for (id, step) in steps.iter().enumerate() {
        now += step.gap;
        if !chosen_instants {
            tokio::time::sleep(Duration::from_micros(step.gap.min(50_000))).await;
        }
        let d = reserve(store, &set, &bases, chosen_instants.then_some(now)).await;
        let at = if chosen_instants {
            now
        } else {
            d.decided_at_us
        };
        let expected = model.admit(id as u64, at);
        prop_assert_eq!(
            d.allowed(),
            expected,
            "attempt {} at +{} µs",
            id,
            at.saturating_sub(T0)
        );
        prop_assert!(model.in_window(at) as u64 <= LIMIT);
        if d.allowed() {
            in_flight.push_back((id as u64, d));
        }
        if let Some(outcome) = step.settle {
            if let Some((oldest, d)) = in_flight.pop_front() {
                settle(store, &set, &bases, &d, outcome).await;
                model.settle(oldest, outcome);
            }
        }
    }
    Ok(())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn check(cases: u32, store: &Store, rt: &tokio::runtime::Runtime, chosen_instants: bool) {
    let mut runner = TestRunner::new(RunnerConfig {
        cases,
        max_shrink_iters: 256,
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    runner
        .run(&steps(), |s| {
            rt.block_on(follows_the_model(store, &s, chosen_instants))
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn outcome_counting_on_the_memory_store_follows_the_model() {
    let rt = runtime();
    check(128, &Store::Memory(MemoryStore::new(1_000_000)), &rt, true);
}

#[test]
fn outcome_counting_on_redis_at_given_instants_follows_the_model() {
    let server = RedisServer::start();
    let rt = runtime();
    let store = rt.block_on(redis_store(
        &server,
        Duration::from_secs(2),
        ClockSource::Local,
    ));
    check(48, &store, &rt, true);
}

#[test]
fn outcome_counting_on_the_redis_clock_follows_the_model() {
    let server = RedisServer::start();
    let rt = runtime();
    let store = rt.block_on(redis_store(
        &server,
        Duration::from_secs(2),
        ClockSource::Redis,
    ));
    check(6, &store, &rt, false);
}

//! Counting outcomes (README, "Protecting OTP and login endpoints") at the store: an attempt is charged when admitted (a
//! reservation) and settled later: kept (and confirmed as answered) when its status counts or
//! never came, refunded when it does not count or the upstream never saw it, and a resetting
//! status forgives the answered attempts while the reservations still in flight stay. For
//! random traces of overlapping attempts and outcomes, on the memory store and on Redis (at
//! given instants, and on the Redis clock), every decision matches a plain model in which
//! reservations count until answered, and no window ever holds more than `limit` counted
//! attempts. `outcomes_through_the_layer` plays such traces through the rate-limit layer itself
//! with clients that leave at random moments.
//!
//! On a blocking route, with attempts that send one of two values the key merges (a tag each)
//! and bursts of parallel attempts abandoned together: a reset forgives only the answered
//! attempts of the value it sent and lifts the block level only when nothing else is left, a
//! refusal that stands on reservations in flight starts no block, and no key is ever blocked
//! without `limit` answered failures in its window.

use crate::support;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use slidegate::config::ClockSource;
use slidegate::store::{Decision, LimitSet, MemoryStore, Store};
use support::redis::RedisServer;
use support::store::{
    bases, limit_sets, redis_store, reserve, settle_first, settle_first_tagged, Settle,
};
use support::store::{model_runner, model_runtime};
use support::unique_prefix;

const T0: u64 = 1_700_000_000_000_000;
const LIMIT: u64 = 3;
const WINDOW: u64 = 2_000_000;
/// The longest a reservation stays in flight (the tools' and tests' limit sets take the
/// embedded layer's): one that is never settled counts until this long after its charge, and
/// a window more.
const SETTLE: u64 = 30_000_000;

/// Whether an attempt charged at `t` counts at `now`: answered, in the window of its charge;
/// still in flight, until it is answered (at most `SETTLE` after its charge, then a window).
fn counts(t: u64, answered: bool, now: u64) -> bool {
    let until = t + WINDOW + if answered { 0 } else { SETTLE };
    t <= now && now < until
}

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
/// the answered ones; an attempt is admitted while fewer than `LIMIT` count: those answered in
/// `(now - WINDOW, now]`, and those in flight ([`counts`]).
#[derive(Default)]
struct Model {
    /// (instant, attempt, answered)
    counting: Vec<(u64, u64, bool)>,
}

impl Model {
    fn in_window(&self, now: u64) -> usize {
        self.counting
            .iter()
            .filter(|(t, _, answered)| counts(*t, *answered, now))
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

fn check(cases: u32, store: &Store, rt: &tokio::runtime::Runtime, chosen_instants: bool) {
    let mut runner = model_runner(cases);
    runner
        .run(&steps(), |s| {
            rt.block_on(follows_the_model(store, &s, chosen_instants))
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn outcome_counting_on_the_memory_store_follows_the_model() {
    let rt = model_runtime();
    check(128, &Store::Memory(MemoryStore::new(1_000_000)), &rt, true);
}

#[test]
fn outcome_counting_on_redis_at_given_instants_follows_the_model() {
    let server = RedisServer::start();
    let rt = model_runtime();
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
    let rt = model_runtime();
    let store = rt.block_on(redis_store(
        &server,
        Duration::from_secs(2),
        ClockSource::Redis,
    ));
    check(6, &store, &rt, false);
}

/// One step of the blocking trace: after `gap` µs, `burst` attempts at once sending alias
/// `alias` (0 or 1); then settle the oldest attempt in flight with `settle`, or, with
/// `abandon`, refund every attempt in flight (clients that reset their streams before anything
/// went upstream).
#[derive(Debug, Clone)]
struct BlockStep {
    gap: u64,
    burst: usize,
    alias: usize,
    settle: Option<Outcome>,
    abandon: bool,
}

fn block_steps() -> impl Strategy<Value = Vec<BlockStep>> {
    let outcome = prop_oneof![
        4 => Just(Outcome::Counted),
        2 => Just(Outcome::Uncounted),
        2 => Just(Outcome::Reset),
    ];
    let step = (
        0u64..700_000,
        prop_oneof![4 => Just(1usize), 1 => 2usize..6],
        0usize..2,
        proptest::option::weighted(0.7, outcome),
        proptest::bool::weighted(0.15),
    )
        .prop_map(|(gap, burst, alias, settle, abandon)| BlockStep {
            gap,
            burst,
            alias,
            settle,
            abandon,
        });
    proptest::collection::vec(step, 1..40)
}

const TAGS: [&str; 2] = ["~00000000000000a1", "~00000000000000b2"];
const BLOCK_FOR: u64 = 1_000_000;

/// The plain model of a blocking route: entries (instant, attempt, alias, answered) kept until
/// a decision finds them out of the window (as the stores evict them), the block's end.
#[derive(Default)]
struct BlockModel {
    entries: Vec<(u64, u64, usize, bool)>,
    blocked_until: u64,
}

/// What the model says of one attempt.
#[derive(Debug, PartialEq)]
enum Verdict {
    Allowed,
    /// Refused, starting a block (the answered attempts alone fill the window).
    BlockStarted,
    /// Refused for reservations still in flight: no block.
    InFlight,
    /// Refused during a block.
    Blocked,
}

impl BlockModel {
    fn decide(&mut self, id: u64, alias: usize, now: u64) -> Verdict {
        self.entries.retain(|e| counts(e.0, e.3, now));
        if self.blocked_until > now {
            return Verdict::Blocked;
        }
        let counted = self.entries.len() as u64;
        let answered = self.entries.iter().filter(|e| e.3).count() as u64;
        if counted < LIMIT {
            self.entries.push((now, id, alias, false));
            return Verdict::Allowed;
        }
        if answered >= LIMIT {
            self.blocked_until = now + BLOCK_FOR;
            return Verdict::BlockStarted;
        }
        Verdict::InFlight
    }

    fn answered_in_window(&self, now: u64) -> u64 {
        let live = self.entries.iter().filter(|e| e.0 + WINDOW > now && e.3);
        live.count() as u64
    }

    fn settle(&mut self, id: u64, alias: usize, outcome: Outcome) {
        match outcome {
            Outcome::Counted | Outcome::NoStatus => {
                for entry in self.entries.iter_mut().filter(|e| e.1 == id) {
                    entry.3 = true;
                }
            }
            Outcome::Uncounted | Outcome::Unseen => self.entries.retain(|e| e.1 != id),
            Outcome::Reset => {
                self.entries.retain(|e| e.1 != id && !(e.3 && e.2 == alias));
                // the block level goes only once nothing else is left
                if self.entries.is_empty() {
                    self.blocked_until = 0;
                }
            }
        }
    }
}

fn blocking_route() -> Arc<LimitSet> {
    limit_sets(
        "[[routes]]\nname = \"login\"\npath = \"/login\"\nupstream = \"up\"\n\
         on_exceed = \"block\"\nblock_for = \"1s\"\n\
         [[routes.limits]]\nname = \"failed\"\nlimit = 3\nwindow = \"2s\"\n\
         count_status = [401]\nreset_status = [200]\n",
    )
    .remove(0)
}

/// Plays `steps` on `store` at chosen instants and holds every decision to the blocking model.
async fn follows_the_blocking_model(
    store: &Store,
    steps: &[BlockStep],
) -> Result<(), TestCaseError> {
    let set = blocking_route();
    let bases = bases(&unique_prefix("outcome-blocks"), "login", "ann");
    let mut model = BlockModel::default();
    let mut in_flight: VecDeque<(u64, usize, Decision)> = VecDeque::new();
    let mut now = T0;
    let mut id = 0u64;
    for step in steps {
        now += step.gap;
        for _ in 0..step.burst {
            id += 1;
            let d = reserve(store, &set, &bases, Some(now)).await;
            let expected = model.decide(id, step.alias, now);
            let got = match (d.allowed(), d.refused_on_answers()) {
                (true, _) => Verdict::Allowed,
                _ if d.outcome == slidegate::store::Outcome::Blocked => Verdict::Blocked,
                (false, true) => Verdict::BlockStarted,
                (false, false) => Verdict::InFlight,
            };
            prop_assert_eq!(
                &got,
                &expected,
                "attempt {} at +{} µs: {:?}",
                id,
                now - T0,
                d
            );
            if got == Verdict::BlockStarted {
                // no key is blocked without `limit` answered failures in its window
                prop_assert!(model.answered_in_window(now) >= LIMIT);
                prop_assert!(d.block_level >= 1);
            }
            if got == Verdict::InFlight {
                // told to come back once the soonest reservation is settled, at the latest
                let settle = slidegate::limit::EMBEDDED_SETTLE;
                prop_assert!(d.retry_after <= settle, "{:?}", d.retry_after);
                prop_assert!(d.limits[0].in_flight);
            }
            if d.allowed() {
                in_flight.push_back((id, step.alias, d));
            }
        }
        if step.abandon {
            while let Some((oldest, alias, d)) = in_flight.pop_front() {
                settle_first(store, &set, &bases, &d, Settle::Refund).await;
                model.settle(oldest, alias, Outcome::Unseen);
            }
        } else if let Some(outcome) = step.settle {
            if let Some((oldest, alias, d)) = in_flight.pop_front() {
                let settle = match outcome {
                    Outcome::Counted | Outcome::NoStatus => Settle::Confirm,
                    Outcome::Uncounted | Outcome::Unseen => Settle::Refund,
                    Outcome::Reset => Settle::Reset,
                };
                settle_first_tagged(store, &set, &bases, &d, settle, TAGS[alias]).await;
                model.settle(oldest, alias, outcome);
            }
        }
    }
    Ok(())
}

fn check_blocks(cases: u32, store: &Store, rt: &tokio::runtime::Runtime) {
    let mut runner = model_runner(cases);
    runner
        .run(&block_steps(), |s| {
            rt.block_on(follows_the_blocking_model(store, &s))
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn blocks_from_answers_and_resets_by_value_on_the_memory_store_follow_the_model() {
    let rt = model_runtime();
    check_blocks(128, &Store::Memory(MemoryStore::new(1_000_000)), &rt);
}

#[test]
fn blocks_from_answers_and_resets_by_value_on_redis_follow_the_model() {
    let server = RedisServer::start();
    let rt = model_runtime();
    let store = rt.block_on(redis_store(
        &server,
        Duration::from_secs(2),
        ClockSource::Local,
    ));
    check_blocks(48, &store, &rt);
}

//! Costs the answer states (README, "Limits on what the answer says it cost") at the store: an
//! attempt reserves its `cost` when admitted, and its answer settles it to what it stated in
//! one call, at once (more is charged at the settlement's instant). For random traces of
//! overlapping attempts whose answers state less, more or nothing, the sliding log holds to a
//! plain model: the window's total is the sum of the settled costs (each attempt counted once,
//! at most the limit), the plain limit beside it counts one unit per attempt, and every
//! decision matches. The counter and gcra give the memory store and Redis identical answers
//! for the same traces.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use slidegate::config::ClockSource;
use slidegate::store::{Decision, LimitSet, MemoryStore, Store};
use support::redis::RedisServer;
use support::store::{bases, limit_sets, redis_store, reserve_units, settle_with};
use support::store::{model_runner, model_runtime};
use support::unique_prefix;

const T0: u64 = 1_700_000_000_000_000;
const TOKENS: u64 = 20;
const REQUESTS: usize = 8;
const WINDOW: u64 = 3_000_000;

/// One step: after `gap` µs, an attempt reserving `reserve`; and the oldest attempt in flight
/// settled when `settle` says so, to what its answer stated (`None`: it stated nothing).
#[derive(Debug, Clone)]
struct Step {
    gap: u64,
    reserve: u64,
    settle: Option<Option<u64>>,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let stated = proptest::option::weighted(0.85, 0u64..30);
    let step = (
        0u64..500_000,
        1u64..7,
        proptest::option::weighted(0.75, stated),
    )
        .prop_map(|(gap, reserve, settle)| Step {
            gap,
            reserve,
            settle,
        });
    proptest::collection::vec(step, 1..60)
}

fn route(algorithm: &str) -> Arc<LimitSet> {
    limit_sets(&format!(
        "[[routes]]\nname = \"llm\"\npath = \"/v1\"\nupstream = \"up\"\n\
         [[routes.limits]]\nname = \"tokens\"\nlimit = {TOKENS}\nwindow = \"3s\"\nalgorithm = \"{algorithm}\"\n\
         cost_from = \"header:x-tokens\"\ncost = 6\n\
         [[routes.limits]]\nname = \"requests\"\nlimit = {REQUESTS}\nwindow = \"3s\"\n"
    ))
    .remove(0)
}

/// The plain model of the log: units (instant, attempt, units) and attempts' instants.
#[derive(Default)]
struct Model {
    units: Vec<(u64, usize, u64)>,
    attempts: Vec<u64>,
}

impl Model {
    fn tokens(&self, now: u64) -> u64 {
        (self.units.iter())
            .filter(|(t, _, _)| now < t + WINDOW && *t <= now)
            .map(|(_, _, u)| u)
            .sum()
    }

    fn requests(&self, now: u64) -> usize {
        self.attempts
            .iter()
            .filter(|t| now < *t + WINDOW && **t <= now)
            .count()
    }

    fn admit(&mut self, id: usize, reserve: u64, now: u64) -> bool {
        let fits = self.tokens(now) + reserve <= TOKENS && self.requests(now) < REQUESTS;
        if fits {
            self.units.push((now, id, reserve));
            self.attempts.push(now);
        }
        fits
    }

    /// The attempt's charge becomes `amount` (at most the limit): fewer units leave its own
    /// entry, more are charged at `now`.
    fn settle(&mut self, id: usize, reserve: u64, amount: u64, now: u64) {
        let amount = amount.min(TOKENS);
        if amount < reserve {
            for e in self.units.iter_mut().filter(|e| e.1 == id) {
                e.2 = amount;
            }
        } else if amount > reserve {
            self.units.push((now, id, amount - reserve));
        }
    }
}

async fn follows_the_model(store: &Store, steps: &[Step]) -> Result<(), TestCaseError> {
    let set = route("sliding_log");
    let bases = bases(&unique_prefix("costs"), "llm", "k");
    let mut model = Model::default();
    let mut in_flight: std::collections::VecDeque<(usize, u64, Decision)> = Default::default();
    let mut now = T0;
    for (id, step) in steps.iter().enumerate() {
        now += step.gap;
        let d = reserve_units(store, &set, &bases, Some(now), step.reserve).await;
        prop_assert_eq!(
            d.allowed(),
            model.admit(id, step.reserve, now),
            "attempt {}",
            id
        );
        prop_assert_eq!(
            d.limits[0].used,
            model.tokens(now),
            "tokens after attempt {}",
            id
        );
        prop_assert_eq!(
            d.limits[1].used as usize,
            model.requests(now),
            "one unit per attempt"
        );
        if d.allowed() {
            in_flight.push_back((id, step.reserve, d));
        }
        // the oldest attempt's answer ends: it states a cost, or nothing (its reservation stays)
        let ended = step
            .settle
            .and_then(|stated| Some((stated, in_flight.pop_front()?)));
        if let Some((Some(amount), (oldest, reserve, d))) = ended {
            settle_with(
                store,
                &set,
                &bases,
                &d,
                vec![],
                vec![(0, amount)],
                Some(now),
            )
            .await;
            model.settle(oldest, reserve, amount, now);
        }
    }
    Ok(())
}

/// The same trace on two stores gives the same decisions (counter, gcra, log).
async fn stores_agree(
    a: &Store,
    b: &Store,
    algorithm: &str,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let set = route(algorithm);
    let bases = bases(&unique_prefix("agree"), "llm", "k");
    let mut in_flight: std::collections::VecDeque<(Decision, Decision)> = Default::default();
    let mut now = T0;
    for (id, step) in steps.iter().enumerate() {
        now += step.gap;
        let da = reserve_units(a, &set, &bases, Some(now), step.reserve).await;
        let db = reserve_units(b, &set, &bases, Some(now), step.reserve).await;
        prop_assert_eq!(
            (da.outcome, da.retry_after, &da.limits),
            (db.outcome, db.retry_after, &db.limits),
            "{} attempt {}",
            algorithm,
            id
        );
        if da.allowed() {
            in_flight.push_back((da, db));
        }
        let ended = step
            .settle
            .and_then(|stated| Some((stated, in_flight.pop_front()?)));
        if let Some((Some(amount), (da, db))) = ended {
            settle_with(a, &set, &bases, &da, vec![], vec![(0, amount)], Some(now)).await;
            settle_with(b, &set, &bases, &db, vec![], vec![(0, amount)], Some(now)).await;
        }
    }
    Ok(())
}

#[test]
fn settled_costs_on_the_memory_store_follow_the_model() {
    let rt = model_runtime();
    let store = Store::Memory(MemoryStore::new(1_000_000));
    model_runner(128)
        .run(&steps(), |s| rt.block_on(follows_the_model(&store, &s)))
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn settled_costs_on_redis_follow_the_model_and_the_memory_store() {
    let server = RedisServer::start();
    let rt = model_runtime();
    let redis = rt.block_on(redis_store(
        &server,
        Duration::from_secs(2),
        ClockSource::Local,
    ));
    model_runner(32)
        .run(&steps(), |s| rt.block_on(follows_the_model(&redis, &s)))
        .unwrap_or_else(|e| panic!("{e}"));
    let memory = Store::Memory(MemoryStore::new(1_000_000));
    for algorithm in ["sliding_window_counter", "gcra", "sliding_log"] {
        model_runner(24)
            .run(&steps(), |s| {
                rt.block_on(stores_agree(&memory, &redis, algorithm, &s))
            })
            .unwrap_or_else(|e| panic!("{algorithm}: {e}"));
    }
}

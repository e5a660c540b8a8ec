//! A batch decides exactly as its requests would one call each (README, "Which algorithm"):
//! random batches decided in one coalesced call give the answers of the same requests decided one
//! call each, on Redis (one script call deciding many requests) and on the memory store, which
//! must also agree with each other.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use slidegate::config::ClockSource;
use slidegate::store::{layout, Decision, DecisionRequest, LimitSet, MemoryStore, Store};
use support::redis::RedisServer;
use support::store::{algorithm_of_limit, limit_sets, redis_store};
use support::unique_prefix;

/// Algorithms of the property test's routes: each alone, and all three on one route.
const ALGORITHMS: [&str; 4] = ["sliding_log", "sliding_window_counter", "gcra", "mixed"];

/// The routes of the property test: each of [`ALGORITHMS`], plain and blocking, each with three
/// limits (`a` per 10 s, `a + b` per 30 s, `b` per minute; "mixed" gives them the counter, the
/// log and gcra, in that order).
fn routes(a: u64, b: u64) -> Vec<Arc<LimitSet>> {
    let mut toml = String::new();
    for (i, algorithm) in ALGORITHMS.iter().enumerate() {
        for block in [false, true] {
            let mode = if block {
                "on_exceed = \"block\"\nblock_for = \"20s\"\n"
            } else {
                ""
            };
            toml.push_str(&format!(
                "[[routes]]\nname = \"r{i}{block}\"\npath = \"/{i}{block}\"\nupstream = \"up\"\n{mode}"
            ));
            let limits = [
                ("short", a, "10s"),
                ("mid", a + b, "30s"),
                ("long", b, "1m"),
            ];
            for (j, (name, limit, window)) in limits.into_iter().enumerate() {
                let algorithm = algorithm_of_limit(algorithm, j);
                toml.push_str(&format!(
                    "[[routes.limits]]\nname = \"{name}\"\nlimit = {limit}\nwindow = \"{window}\"\nalgorithm = \"{algorithm}\"\n"
                ));
            }
        }
    }
    limit_sets(&toml)
}

const T0: u64 = 1_700_000_000_000_000;

/// One request of a batch: which route, which key, what cost.
type Step = (usize, usize, u64);

/// Decides `batches` (each at its instant, `gap` after the previous one) twice on `store`:
/// each batch in one `decide_many`, and each request alone, in the same order, at the same
/// instant, under another key prefix. Returns both answer lists.
async fn batched_and_alone(
    store: &Store,
    sets: &[Arc<LimitSet>],
    batches: &[(u64, Vec<Step>)],
) -> (Vec<Decision>, Vec<Decision>) {
    let (together, alone) = (unique_prefix("together"), unique_prefix("alone"));
    // A one-slot request's bases: the route's key slot alone.
    let bases = |prefix: &str, route: usize, key: usize| {
        vec![layout::base(
            prefix,
            &format!("r{route}"),
            "",
            &format!("k{key}"),
        )]
    };
    let (mut batched, mut single) = (Vec::new(), Vec::new());
    let mut now = T0;
    for (gap, steps) in batches {
        now += gap;
        let step_bases: Vec<Vec<String>> = steps
            .iter()
            .map(|&(r, k, _)| bases(&together, r, k))
            .collect();
        let requests: Vec<DecisionRequest<'_>> = steps
            .iter()
            .zip(&step_bases)
            .map(|(&(r, _, cost), bases)| DecisionRequest::charge(&sets[r], bases, cost))
            .collect();
        for answer in store.decide_many(&requests, Some(now)).await {
            batched.push(answer.expect("the store decides"));
        }
        for &(r, k, cost) in steps {
            let bases = bases(&alone, r, k);
            let request = DecisionRequest::charge(&sets[r], &bases, cost);
            let mut answer = store.decide_many(&[request], Some(now)).await;
            single.push(answer.pop().unwrap().expect("the store decides"));
        }
    }
    (batched, single)
}

/// Random batches decided in one coalesced call give exactly the answers of the same requests
/// decided one call each at the same instants, in the same order: on Redis (one script call
/// deciding many requests) and on the memory store, which must also agree with each other.
/// Batches repeat keys (key 0 is hot), spend 0 to 3 units, and mix every algorithm (also within
/// one route), blocking routes and three limits.
#[test]
fn a_batch_decides_exactly_like_its_requests_one_by_one() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config as RunnerConfig, TestCaseError, TestRunner};

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = RedisServer::start();
    let redis = runtime.block_on(redis_store(
        &server,
        Duration::from_secs(5),
        ClockSource::Local,
    ));
    let key = prop_oneof![3 => Just(0usize), 2 => 1usize..6];
    let step = (0..2 * ALGORITHMS.len(), key, 0u64..=3);
    let batch = (0u64..6_000_000, proptest::collection::vec(step, 1..40));
    let strategy = (1u64..6, 2u64..12, proptest::collection::vec(batch, 1..6));
    let mut runner = TestRunner::new(RunnerConfig {
        cases: 48,
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    runner
        .run(&strategy, |(a, b, batches)| {
            let sets = routes(a, b);
            runtime.block_on(async {
                let (redis_batched, redis_alone) = batched_and_alone(&redis, &sets, &batches).await;
                let memory = Store::Memory(MemoryStore::new(1_000_000));
                let (memory_batched, memory_alone) =
                    batched_and_alone(&memory, &sets, &batches).await;
                let answers = redis_batched.len();
                for i in 0..answers {
                    prop_assert_eq!(&redis_batched[i], &redis_alone[i], "Redis, answer {}", i);
                    prop_assert_eq!(&memory_batched[i], &memory_alone[i], "memory, answer {}", i);
                    prop_assert_eq!(
                        &redis_batched[i],
                        &memory_batched[i],
                        "stores, answer {}",
                        i
                    );
                }
                Ok::<(), TestCaseError>(())
            })
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

//! One behavioural suite, two stores: the same scripted and random sequences run against the
//! embedded memory store and a real Redis must give the same answers, and the memory store must
//! match the plain reference model of the sliding log (`support/reference.rs`), including the
//! promise that a client that waits exactly Retry-After is allowed and one that comes back 1 µs
//! earlier is not. `tests/decisions/accuracy.rs` holds both stores to the models of both
//! algorithms.

use crate::support;

use std::sync::Arc;

use proptest::prelude::*;
use slidegate::config::ClockSource;
use slidegate::store::{Decision, LimitSet, MemoryStore, Outcome, Store};
use support::redis::RedisServer;
use support::reference::Reference;
use support::store::{algorithm_of_limit, bases, decide_at, limit_sets};
use support::unique_prefix;

const T0: u64 = 1_700_000_000_000_000;
const SEC: u64 = 1_000_000;

/// A route of `limits` under one algorithm (or both, `"mixed"`), blocking for `block` when set.
/// A route of `limits` under one algorithm (or all three in turn, `"mixed"`), blocking for
/// `block` when set.
fn route(route_algorithm: &str, limits: &[(u64, &str)], block: Option<&str>) -> Arc<LimitSet> {
    let mode = block.map_or(String::new(), |b| {
        format!("on_exceed = \"block\"\nblock_for = \"{b}\"\nblock_growth = 2\n")
    });
    let mut toml = format!("[[routes]]\nname = \"r\"\npath = \"/*\"\nupstream = \"up\"\n{mode}");
    for (i, (limit, window)) in limits.iter().enumerate() {
        let algorithm = algorithm_of_limit(route_algorithm, i);
        toml.push_str(&format!("[[routes.limits]]\nname = \"l{i}\"\nlimit = {limit}\nwindow = \"{window}\"\nalgorithm = \"{algorithm}\"\n"));
    }
    limit_sets(&toml).remove(0)
}

async fn redis_store(server: &RedisServer) -> Store {
    let timeout = std::time::Duration::from_secs(2);
    support::store::redis_store(server, timeout, ClockSource::Local).await
}

async fn decide(
    store: &Store,
    limits: &Arc<LimitSet>,
    bases: &[String],
    now_us: u64,
    cost: u64,
) -> Decision {
    decide_at(store, limits, bases, Some(now_us), cost).await
}

/// Runs `(offset_us, cost)` steps against both stores and asserts identical decisions.
async fn same_answers(redis: &Store, route: &Arc<LimitSet>, steps: &[(u64, u64)]) -> Vec<Decision> {
    let memory = Store::Memory(MemoryStore::new(1_000_000));
    let base = bases(&unique_prefix("eq"), "r", "k");
    let mut out = Vec::new();
    for &(offset, cost) in steps {
        let m = decide(&memory, route, &base, T0 + offset, cost).await;
        let r = decide(redis, route, &base, T0 + offset, cost).await;
        assert_eq!(
            m, r,
            "memory and Redis disagree at +{offset} µs (cost {cost})"
        );
        out.push(m);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_sequences_agree_on_both_stores() {
    let server = RedisServer::start();
    let redis = redis_store(&server).await;

    // Sliding log, two limits: 3 per 10 s and 5 per minute.
    let r = route("sliding_log", &[(3, "10s"), (5, "1m")], None);
    let steps: Vec<(u64, u64)> = [0, 1, 2, 3, 4, 10, 11, 12, 13, 21, 22, 30, 59, 60, 61, 75]
        .iter()
        .map(|s| (s * SEC, 1))
        .collect();
    let d = same_answers(&redis, &r, &steps).await;
    let outcomes: Vec<bool> = d.iter().map(|d| d.allowed()).collect();
    assert_eq!(
        outcomes,
        [
            true, true, true, false, false, true, true, false, false, false, false, false, false,
            true, true, true
        ]
    );
    // Rejected at +3 s by the 10 s limit: exactly 7 s until the entry of +0 s leaves.
    assert_eq!(d[3].retry_after.as_micros() as u64, 7 * SEC);

    // Costs, peeks and a cost above the limit.
    let r = route("sliding_log", &[(4, "1m")], None);
    same_answers(
        &redis,
        &r,
        &[(0, 3), (1, 0), (2, 2), (3, 1), (4, 5), (SEC * 61, 4)],
    )
    .await;

    // Block mode: the exceed starts a 30 s block; its Retry-After is the window's own wait
    // (later), on every answer. A client that comes back after the block but before that wait
    // exceeds again and starts the next block, twice as long (60 s, so still on at +61 s).
    let r = route("sliding_log", &[(2, "1m")], Some("30s"));
    let d = same_answers(
        &redis,
        &r,
        &[
            (0, 1),
            (1, 1),
            (2, 1),
            (SEC, 1),
            (31 * SEC, 1),
            (61 * SEC, 1),
        ],
    )
    .await;
    let outcomes: Vec<Outcome> = d.iter().map(|d| d.outcome).collect();
    let wait = 60 * SEC - 2;
    assert_eq!(
        d[2].retry_after.as_micros() as u64,
        wait,
        "the window's wait, not the block's"
    );
    assert_eq!(
        d[3].retry_after.as_micros() as u64,
        59 * SEC,
        "the same wait, seen later"
    );
    assert_eq!(d[4].block_level, 2);
    assert_eq!(
        outcomes[2..],
        [
            Outcome::Rejected,
            Outcome::Blocked,
            Outcome::Rejected,
            Outcome::Blocked
        ]
    );

    // Sliding window counter.
    let r = route("sliding_window_counter", &[(10, "1m"), (15, "1h")], None);
    let steps: Vec<(u64, u64)> = (0..40).map(|i| (i * 5 * SEC, 1 + i % 2)).collect();
    same_answers(&redis, &r, &steps).await;

    // GCRA: 4 per 10 s as a steady rate, a burst of 4.
    let r = route("gcra", &[(4, "10s")], None);
    let steps: Vec<(u64, u64)> = (0..30).map(|i| (i * SEC / 2, 1 + i % 2)).collect();
    same_answers(&redis, &r, &steps).await;

    // GCRA with a burst above its limit (4 per 2 s, 6 at once): the room past the limit is let
    // through but not shown, so the quota left never exceeds the limit (the policy's `q`).
    let r = limit_sets(
        "[[routes]]\nname = \"r\"\npath = \"/*\"\nupstream = \"up\"\n[[routes.limits]]\nname = \"g\"\nlimit = 4\nwindow = \"2s\"\nalgorithm = \"gcra\"\nburst = 6\n",
    )
    .remove(0);
    let d = same_answers(&redis, &r, &[(0, 1); 7]).await;
    let remaining: Vec<u64> = d.iter().map(|d| d.limits[0].remaining()).collect();
    assert_eq!(remaining, [4, 4, 3, 2, 1, 0, 0]);
    assert!(d[..6].iter().all(Decision::allowed), "the whole burst fits");
    assert!(!d[6].allowed());

    // Escalating blocks: 1 s, then 2 s (growth 2), on two keys of one slot's limits.
    let r = route("sliding_log", &[(1, "1s")], Some("1s"));
    let d = same_answers(
        &redis,
        &r,
        &[(0, 1), (1, 1), (SEC + 1, 1), (SEC + 2, 1), (4 * SEC, 1)],
    )
    .await;
    assert_eq!(d[1].block_level, 1);
    assert_eq!(d[1].retry_after.as_micros() as u64, SEC);
    assert_eq!(
        d[3].block_level, 2,
        "the second block within block_forget is one level up"
    );
    assert_eq!(d[3].retry_after.as_micros() as u64, 2 * SEC);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn memory_store_matches_the_reference_and_retry_after_is_exact(
        limit_a in 1u64..5, limit_b in 1u64..8,
        gaps in proptest::collection::vec(0u64..4_000_000, 1..40),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let r = route("sliding_log", &[(limit_a, "3s"), (limit_b, "10s")], None);
            let store = Store::Memory(MemoryStore::new(1_000_000));
            let base = bases("p", "r", "k");
            let mut model = Reference::of(&r);
            let mut now = T0;
            for gap in gaps {
                now += gap;
                let d = decide(&store, &r, &base, now, 1).await;
                prop_assert_eq!(&d, &model.decide(now, 1));
                if !d.allowed() {
                    // 1 µs early is still too early; exactly on time fits.
                    let retry = d.retry_after.as_micros() as u64;
                    now += retry - 1;
                    let early = decide(&store, &r, &base, now, 1).await;
                    prop_assert!(!early.allowed());
                    prop_assert_eq!(&early, &model.decide(now, 1));
                    now += 1;
                    let on_time = decide(&store, &r, &base, now, 1).await;
                    prop_assert!(on_time.allowed());
                    prop_assert_eq!(&on_time, &model.decide(now, 1));
                }
            }
            Ok(())
        })?;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_sequences_agree_on_both_stores() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let server = RedisServer::start();
    let redis = redis_store(&server).await;
    let mut runner = TestRunner::deterministic();
    let strategy = (
        1u64..6,
        1u64..10,
        proptest::collection::vec((0u64..3_000_000, 0u64..3), 1..60),
    );
    for case in 0..32 {
        let (a, b, steps) = strategy.new_tree(&mut runner).unwrap().current();
        let mut t = 0;
        let steps: Vec<(u64, u64)> = steps
            .into_iter()
            .map(|(gap, cost)| {
                t += gap;
                (t, cost)
            })
            .collect();
        let algorithm = ["sliding_log", "sliding_window_counter", "gcra", "mixed"][case % 4];
        let block = (case % 2 == 0).then_some("5s");
        let r = route(algorithm, &[(a, "4s"), (b, "1m")], block);
        same_answers(&redis, &r, &steps).await;
    }
}

/// A dry run answers exactly as the real batch then does at the same instant (a key met again
/// sees the charges and blocks of the earlier ones), on both stores, and writes nothing: the
/// real batch that follows it still finds the store as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_answers_as_the_real_batch_and_writes_nothing() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    use slidegate::store::DecisionRequest;
    let server = RedisServer::start();
    let redis = redis_store(&server).await;
    let mut runner = TestRunner::deterministic();
    let strategy = (
        1u64..5,
        2u64..9,
        proptest::collection::vec(0usize..3, 0..8),
        proptest::collection::vec(0usize..3, 1..30),
        1u64..3,
    );
    let mut refused_by_the_batch_itself = 0;
    for case in 0..24 {
        let (a, b, before, batch, cost) = strategy.new_tree(&mut runner).unwrap().current();
        let algorithm = ["sliding_log", "sliding_window_counter", "gcra", "mixed"][case % 4];
        let block = (case % 2 == 0).then_some("5s");
        let r = route(algorithm, &[(a, "4s"), (b, "1m")], block);
        let prefix = unique_prefix("dry");
        let keys: Vec<Vec<String>> = (0..3)
            .map(|k| bases(&prefix, "r", &format!("k{k}")))
            .collect();
        let memory = Store::Memory(MemoryStore::new(1_000_000));
        for store in [&memory, &redis] {
            for (i, &k) in before.iter().enumerate() {
                decide(store, &r, &keys[k], T0 + i as u64 * 1000, 1).await;
            }
        }
        let now = T0 + SEC;
        let requests = |dry_run: bool| -> Vec<DecisionRequest<'_>> {
            batch
                .iter()
                .map(|&k| DecisionRequest {
                    dry_run,
                    ..DecisionRequest::charge(&r, &keys[k], cost)
                })
                .collect()
        };
        let mut answers = Vec::new();
        for store in [&memory, &redis] {
            let dry: Vec<Decision> = store
                .decide_many(&requests(true), Some(now))
                .await
                .into_iter()
                .map(|d| d.expect("decided"))
                .collect();
            let real: Vec<Decision> = store
                .decide_many(&requests(false), Some(now))
                .await
                .into_iter()
                .map(|d| d.expect("decided"))
                .collect();
            assert_eq!(
                dry, real,
                "case {case} ({algorithm}): the dry run differs from the real batch"
            );
            answers.push(real);
        }
        assert_eq!(
            answers[0], answers[1],
            "case {case}: memory and Redis disagree"
        );
        // a refusal that only the batch's own earlier charges explain
        let first = batch
            .iter()
            .position(|&k| !answers[0][batch.iter().position(|&j| j == k).unwrap()].allowed());
        if answers[0].iter().any(|d| !d.allowed()) && first.is_none() {
            refused_by_the_batch_itself += 1;
        }
    }
    assert!(
        refused_by_the_batch_itself > 3,
        "too few cases where a key's earlier decisions in the batch refuse a later one"
    );
}

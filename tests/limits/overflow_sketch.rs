//! The memory store when full (README, "When the in-process store is full"): keys it does not
//! hold are counted in an overflow sketch per limit that can only over-count.
//!
//! A property test against the plain reference models (`support/reference.rs`): whatever the
//! mix of held keys, flood keys and victims, and for every windowed algorithm, a decision the
//! table made is exactly the model's, a decision the sketch made never allows what the model
//! refuses (a gcra burst included), no key is allowed more than `limit` times by the sketch
//! within any window, and a
//! dry run just before each decision answers as it does (the sketch's refusals too). And
//! the flip side: keys that come during a flood are still served, within what the sketch's size
//! promises.

use crate::support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestCaseResult, TestRunner};
use slidegate::store::{Decision, DecisionRequest, LimitSet, MemoryStore, Outcome, Store};
use support::reference::Reference;
use support::store::{bases, decide_at, limit_sets};

const T0: u64 = 1_700_000_000_000_000;
const MS: u64 = 1_000;
const SEC: u64 = 1_000_000;

/// Live keys the store under test holds: the table is full once the held keys are in.
const HELD: usize = 8;

fn limit_set(algorithm: &str, limit: u64, window: &str) -> Arc<LimitSet> {
    limit_set_with_burst(algorithm, limit, window, 0)
}

/// A limit of `algorithm`, with gcra's `burst` when it is not 0.
fn limit_set_with_burst(algorithm: &str, limit: u64, window: &str, burst: u64) -> Arc<LimitSet> {
    let burst = match burst {
        0 => String::new(),
        b => format!("burst = {b}\n"),
    };
    let toml = format!(
        "[[routes]]\nname = \"r\"\npath = \"/*\"\nupstream = \"up\"\n[[routes.limits]]\nname = \"l\"\nlimit = {limit}\nwindow = \"{window}\"\nalgorithm = \"{algorithm}\"\n{burst}"
    );
    limit_sets(&toml).remove(0)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Who asks in one step of a trace.
#[derive(Debug, Clone, Copy)]
enum Who {
    /// One of the keys that filled the table.
    Held(usize),
    /// One of a few keys the table never held.
    Victim(usize),
    /// This many fresh keys at once, one request each.
    Flood(usize),
}

#[derive(Debug, Clone)]
struct Trace {
    algorithm: &'static str,
    limit: u64,
    window: &'static str,
    /// gcra's burst (0: none, the limit).
    burst: u64,
    steps: Vec<(u64, Who)>,
}

fn who() -> impl Strategy<Value = Who> {
    prop_oneof![
        2 => (0..HELD).prop_map(Who::Held),
        4 => (0usize..3).prop_map(Who::Victim),
        2 => (1usize..60).prop_map(Who::Flood),
    ]
}

/// Gaps that keep requests in one window, and some that cross one or two.
fn gap() -> impl Strategy<Value = u64> {
    prop_oneof![3 => Just(0), 4 => 0..300 * MS, 2 => 0..4 * SEC, 1 => 0..30 * SEC]
}

fn trace() -> impl Strategy<Value = Trace> {
    (
        prop::sample::select(vec!["sliding_log", "sliding_window_counter", "gcra"]),
        1u64..6,
        prop::sample::select(vec!["1s", "3s", "10s", "1m"]),
        0u64..4,
        prop::collection::vec((gap(), who()), 1..80),
    )
        .prop_map(|(algorithm, limit, window, burst, steps)| Trace {
            algorithm,
            limit,
            window,
            burst: if algorithm == "gcra" { burst } else { 0 },
            steps,
        })
}

/// One key as the test follows it: its model, fed only what the store allowed, and the
/// instants the sketch allowed it.
struct Followed {
    model: Reference,
    sketch_allowed: Vec<u64>,
}

/// Decides one request of `key` at `now` and holds the answer to the model.
async fn ask(
    store: &Store,
    set: &Arc<LimitSet>,
    keys: &mut HashMap<String, Followed>,
    key: String,
    now: u64,
) -> TestCaseResult {
    let followed = keys.entry(key.clone()).or_insert_with(|| Followed {
        model: Reference::of(set),
        sketch_allowed: Vec::new(),
    });
    let bases = bases("p", "r", &key);
    // a dry run at the same instant answers as the call does, the sketch's refusals included
    let dry = DecisionRequest {
        dry_run: true,
        ..DecisionRequest::charge(set, &bases, 1)
    };
    let dry = (store.decide_many(&[dry], Some(now)).await.pop())
        .expect("one answer")
        .expect("store decides");
    let decision: Decision = decide_at(store, set, &bases, Some(now), 1).await;
    prop_assert_eq!(
        (dry.allowed(), dry.approximate),
        (decision.allowed(), decision.approximate),
        "a dry run of {} at {} answered unlike the call",
        key,
        now
    );
    let mut model = followed.model.clone();
    let modelled = model.decide(now, 1);
    if decision.approximate {
        prop_assert!(
            !decision.allowed() || modelled.allowed(),
            "the sketch allowed {key} at {now} where the model refuses"
        );
        if decision.allowed() {
            let window = set.limits[0].window_us;
            let allowed = &mut followed.sketch_allowed;
            allowed.push(now);
            let within = allowed.iter().filter(|&&t| t + window > now).count() as u64;
            prop_assert!(
                within <= set.limits[0].limit,
                "the sketch allowed {key} {within} times within one window"
            );
        }
    } else {
        prop_assert_eq!(
            decision.allowed(),
            modelled.allowed(),
            "the table decided {} at {} unlike the model",
            key,
            now
        );
    }
    if decision.allowed() {
        followed.model = model;
    }
    Ok(())
}

fn run(trace: Trace) -> TestCaseResult {
    runtime().block_on(async {
        let memory = MemoryStore::new(HELD);
        let store = Store::Memory(memory.clone());
        let set = limit_set_with_burst(trace.algorithm, trace.limit, trace.window, trace.burst);
        let mut keys: HashMap<String, Followed> = HashMap::new();
        let mut now = T0;
        for i in 0..HELD {
            ask(&store, &set, &mut keys, format!("held{i}"), now).await?;
        }
        prop_assert_eq!(memory.live_keys(), HELD);
        let mut fresh = 0;
        for (gap, who) in trace.steps {
            now += gap;
            match who {
                Who::Held(i) => ask(&store, &set, &mut keys, format!("held{i}"), now).await?,
                Who::Victim(v) => ask(&store, &set, &mut keys, format!("victim{v}"), now).await?,
                Who::Flood(n) => {
                    for _ in 0..n {
                        fresh += 1;
                        ask(&store, &set, &mut keys, format!("flood{fresh}"), now).await?;
                    }
                }
            }
            prop_assert!(memory.live_keys() <= HELD, "the table grew past max_keys");
        }
        Ok(())
    })
}

#[test]
fn a_full_store_never_allows_more_than_the_model_whatever_the_flood() {
    let config = RunnerConfig {
        cases: 96,
        max_shrink_iters: 400,
        failure_persistence: None,
        ..RunnerConfig::default()
    };
    if let Err(e) = TestRunner::new(config).run(&trace(), run) {
        panic!("{e}");
    }
}

/// Keys that come during a flood are served within the sketch's promise. A store of 64 keys
/// keeps sketches 256 counters wide in 4 rows: with `N` units counted, a key's count is
/// over-stated by more than `e * N / 256` with probability at most `e^-4` (under 2 %). Here
/// `N` is 256 flood units and 32 newcomers asking 10 units each (576 in all: a promise of 7 of
/// their limit of 20), so all but about one in fifty newcomers get all 10; the test asks for 30
/// of 32.
#[tokio::test]
async fn newcomers_during_a_flood_are_served_within_the_sketchs_promise() {
    const NEWCOMERS: usize = 32;
    const ASKED: usize = 10;
    let store = Store::Memory(MemoryStore::new(64));
    let set = limit_set("sliding_log", 20, "1h");
    let one = |key: String, at: u64| {
        let (store, set) = (&store, &set);
        async move {
            let d = decide_at(store, set, &bases("p", "r", &key), Some(at), 1).await;
            (d.allowed(), d.approximate)
        }
    };
    for i in 0..64 {
        assert_eq!(one(format!("held{i}"), T0).await, (true, false));
    }
    let mut flood_served = 0;
    for i in 0..256 {
        let (allowed, approximate) = one(format!("flood{i}"), T0 + MS).await;
        assert!(approximate, "the table was full");
        flood_served += usize::from(allowed);
    }
    let mut served_whole = 0;
    for n in 0..NEWCOMERS {
        let mut served = 0;
        for r in 0..ASKED {
            let at = T0 + 2 * MS + (n * ASKED + r) as u64;
            served += usize::from(one(format!("newcomer{n}"), at).await.0);
        }
        served_whole += usize::from(served == ASKED);
    }
    eprintln!(
        "flood keys served {flood_served} of 256; newcomers served in full {served_whole} of {NEWCOMERS}"
    );
    assert!(flood_served >= 250, "flood keys served: {flood_served}");
    assert!(
        served_whole >= NEWCOMERS - 2,
        "newcomers served in full: {served_whole} of {NEWCOMERS}"
    );
    // and a key over its limit is refused, approximately
    let newcomer = "newcomer0".to_string();
    let mut last = (true, true);
    for r in 0..20 {
        last = one(newcomer.clone(), T0 + SEC + r).await;
    }
    assert_eq!(last, (false, true), "20 more units of a limit of 20");
}

/// A concurrency limit counted in the sketch (the table is full) refuses a full key with the
/// wait every concurrency refusal tells, 1 s (a slot may come back any moment), not the time
/// until the sketch's window (the lease) rolls over.
#[tokio::test]
async fn a_full_key_in_the_sketch_tells_a_slots_wait() {
    let toml = "[[routes]]\nname = \"r\"\npath = \"/*\"\nupstream = \"up\"\n[[routes.limits]]\nname = \"inflight\"\nlimit = 2\nalgorithm = \"concurrency\"\nlease = \"1m\"\n";
    let set = limit_sets(toml).remove(0);
    let memory = MemoryStore::new(HELD);
    let store = Store::Memory(memory.clone());
    for i in 0..HELD {
        let held = bases("p", "r", &format!("held{i}"));
        assert!(decide_at(&store, &set, &held, Some(T0), 1).await.allowed());
    }
    assert_eq!(memory.live_keys(), HELD);
    let newcomer = bases("p", "r", "newcomer");
    for _ in 0..2 {
        let d = decide_at(&store, &set, &newcomer, Some(T0 + SEC), 1).await;
        assert!(d.allowed() && d.approximate, "{d:?}");
    }
    let full = decide_at(&store, &set, &newcomer, Some(T0 + SEC), 1).await;
    assert!(!full.allowed() && full.approximate, "{full:?}");
    assert_eq!(full.retry_after.as_micros(), u128::from(SEC), "{full:?}");
    assert_eq!(full.limits[0].retry_after.as_micros(), u128::from(SEC));
}

/// A key the full table has no room for is blocked as one it holds: its block (kept in the
/// block sketch) outlasts the sketch's count, for the whole `block_for`, and the next block's
/// level escalates; a key the sketch never blocked is not refused by it. So is a key whose
/// count the table holds but whose marker it has no room for.
#[tokio::test]
async fn a_key_outside_the_table_serves_its_whole_block_and_escalates() {
    let store = Store::Memory(MemoryStore::new(HELD));
    let toml = "[[routes]]\nname = \"r\"\npath = \"/*\"\nupstream = \"up\"\non_exceed = \"block\"\nblock_for = \"10s\"\nblock_growth = 2\n[[routes.limits]]\nname = \"l\"\nlimit = 2\nwindow = \"1s\"\n";
    let set = limit_sets(toml).remove(0);
    let ask = |key: &'static str, at: u64| {
        let (store, set) = (&store, &set);
        async move { decide_at(store, set, &bases("p", "r", key), Some(at), 1).await }
    };
    // the owner's count is in the table, then the table fills: no room for its marker
    assert!(ask("owner", T0).await.allowed());
    let filler = limit_set("sliding_log", 5, "1h");
    for i in 0..HELD - 1 {
        let key = format!("held{i}");
        let d = decide_at(&store, &filler, &bases("p", "f", &key), Some(T0), 1).await;
        assert!(d.allowed() && !d.approximate);
    }
    assert!(ask("owner", T0).await.allowed());
    let owners = ask("owner", T0).await;
    assert_eq!((owners.outcome, owners.block_level), (Outcome::Rejected, 1));
    assert!(!owners.approximate, "its count is exact");
    let (first, second) = (ask("victim", T0).await, ask("victim", T0).await);
    assert!(first.allowed() && second.allowed() && first.approximate);
    let exceed = ask("victim", T0).await;
    assert_eq!(exceed.outcome, Outcome::Rejected);
    assert_eq!(exceed.block_level, 1, "{exceed:?}");
    assert_eq!(exceed.retry_after, Duration::from_secs(10));
    // three windows later the sketch's count has passed; the block has not
    let later = ask("victim", T0 + 3 * SEC).await;
    assert_eq!(later.outcome, Outcome::Blocked, "{later:?}");
    assert_eq!(later.retry_after, Duration::from_secs(7));
    let owners = ask("owner", T0 + 3 * SEC).await;
    assert_eq!(owners.outcome, Outcome::Blocked, "{owners:?}");
    assert!(ask("bystander", T0 + 3 * SEC).await.allowed());
    // after the block: served again, and the next exceed blocks twice as long
    let after = T0 + 10 * SEC + MS;
    assert!(ask("victim", after).await.allowed());
    assert!(ask("victim", after).await.allowed());
    let again = ask("victim", after).await;
    assert_eq!((again.outcome, again.block_level), (Outcome::Rejected, 2));
    assert_eq!(again.retry_after, Duration::from_secs(20));
}

//! Attempts in flight at the store (README, "Limits on what is in flight"): an admitted attempt
//! takes a lease in the same atomic decision as the route's window limit, the gateway frees it
//! when the answer has been sent (or its client left and the upstream answered), and a lease
//! whose gateway died expires `lease` after it was taken. For random arrivals, departures,
//! client exits and gateway kills on two gateways, on the memory store and on Redis (at given
//! instants), every decision matches a plain model, no key ever has more than `limit` attempts
//! in flight, an attempt the window refuses holds no slot, and in the end every lease has been
//! freed or has expired.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use slidegate::config::ClockSource;
use slidegate::store::{layout, Decision, LimitSet, MemoryStore, Settlement, Store};
use support::redis::RedisServer;
use support::store::{bases, decide_at, limit_sets, redis_store, reserve, settle_with};
use support::store::{model_runner, model_runtime};
use support::unique_prefix;

const T0: u64 = 1_700_000_000_000_000;
/// Attempts in flight per key.
const SLOTS: usize = 3;
const LEASE: u64 = 2_000_000;
/// The window limit beside it: attempts per window.
const PER_WINDOW: usize = 7;
const WINDOW: u64 = 3_000_000;

/// What happens after `gap` µs.
#[derive(Debug, Clone)]
enum Action {
    /// A new attempt through gateway 0 or 1.
    Arrive(usize),
    /// The answer of the `n`-th attempt in flight (mod their number) has been sent whole.
    Sent(usize),
    /// The client of the `n`-th attempt left after the upstream answered.
    ClientLeft(usize),
    /// Gateway 0 or 1 dies: the attempts it holds are never freed.
    Kill(usize),
}

fn steps() -> impl Strategy<Value = Vec<(u64, Action)>> {
    let action = prop_oneof![
        5 => (0usize..2).prop_map(Action::Arrive),
        3 => any::<usize>().prop_map(Action::Sent),
        1 => any::<usize>().prop_map(Action::ClientLeft),
        1 => (0usize..2).prop_map(Action::Kill),
    ];
    proptest::collection::vec((0u64..600_000, action), 1..60)
}

/// The plain model: leases (attempt, expiry) and the instants of admitted attempts.
#[derive(Default)]
struct Model {
    leases: Vec<(usize, u64)>,
    admitted: Vec<u64>,
}

impl Model {
    fn in_flight(&self, now: u64) -> usize {
        self.leases.iter().filter(|(_, e)| *e > now).count()
    }

    fn admit(&mut self, id: usize, now: u64) -> bool {
        let in_window = self
            .admitted
            .iter()
            .filter(|t| now < **t + WINDOW && **t <= now)
            .count();
        let fits = self.in_flight(now) < SLOTS && in_window < PER_WINDOW;
        if fits {
            self.leases.push((id, now + LEASE));
            self.admitted.push(now);
        }
        fits
    }

    fn free(&mut self, id: usize) {
        self.leases.retain(|(i, _)| *i != id);
    }
}

fn route() -> Arc<LimitSet> {
    limit_sets(&format!(
        "[[routes]]\nname = \"api\"\npath = \"/api\"\nupstream = \"up\"\n\
         [[routes.limits]]\nname = \"inflight\"\nlimit = {SLOTS}\nalgorithm = \"concurrency\"\nlease = \"2s\"\n\
         [[routes.limits]]\nname = \"per-window\"\nlimit = {PER_WINDOW}\nwindow = \"3s\"\n"
    ))
    .remove(0)
}

/// Plays `steps` on `store` at given instants and holds every decision to the model's;
/// `redis` (when given) is the server, to look at the leases themselves at the end.
async fn follows_the_model(
    store: &Store,
    steps: &[(u64, Action)],
    redis: Option<&RedisServer>,
) -> Result<(), TestCaseError> {
    let set = route();
    let bases = bases(&unique_prefix("inflight"), "api", "k");
    let mut model = Model::default();
    // per gateway: the attempts it holds in flight
    let mut held: [Vec<(usize, Decision)>; 2] = [Vec::new(), Vec::new()];
    let mut freed: Vec<String> = Vec::new();
    let mut now = T0;
    for (id, (gap, action)) in steps.iter().enumerate() {
        now += gap;
        match action {
            Action::Arrive(g) => {
                let d = reserve(store, &set, &bases, Some(now)).await;
                prop_assert_eq!(
                    d.allowed(),
                    model.admit(id, now),
                    "attempt {} at +{}",
                    id,
                    now - T0
                );
                let in_flight = model.in_flight(now);
                prop_assert!(in_flight <= SLOTS);
                prop_assert_eq!(d.limits[0].used as usize, in_flight, "slots taken");
                if d.allowed() {
                    held[*g].push((id, d));
                }
            }
            Action::Sent(n) | Action::ClientLeft(n) => {
                let all: Vec<(usize, usize)> = (0..2)
                    .flat_map(|g| (0..held[g].len()).map(move |i| (g, i)))
                    .collect();
                if all.is_empty() {
                    continue;
                }
                let (g, i) = all[n % all.len()];
                let (attempt, d) = held[g].remove(i);
                // both end as the gateway ends them: the slot is freed
                settle_with(store, &set, &bases, &d, vec![0], vec![], None).await;
                freed.push(d.receipt.as_ref().unwrap().parts[0].member.clone());
                model.free(attempt);
            }
            Action::Kill(g) => held[*g].clear(),
        }
    }
    // every lease is freed or expires `lease` after it was taken
    let end = now + LEASE + 1;
    let read = decide_at(store, &set, &bases, Some(end), 0).await;
    prop_assert_eq!(read.limits[0].used, 0);
    if let Some(server) = redis {
        let key = layout::state_key(&bases[0], "#inflight");
        let support::redis::Resp::Array(items) =
            server.cmd(&["ZRANGE", &key, "0", "-1", "WITHSCORES"])
        else {
            return Err(TestCaseError::fail("ZRANGE answers an array"));
        };
        for pair in items.chunks(2) {
            let member = pair[0].text();
            prop_assert!(
                !freed.contains(&member),
                "a freed lease is still there: {}",
                member
            );
            prop_assert!(
                pair[1].text().parse::<u64>().unwrap() < end,
                "a lease outlives its term"
            );
        }
    }
    Ok(())
}

fn check(cases: u32, store: &Store, rt: &tokio::runtime::Runtime, redis: Option<&RedisServer>) {
    let mut runner = model_runner(cases);
    runner
        .run(&steps(), |s| {
            rt.block_on(follows_the_model(store, &s, redis))
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn attempts_in_flight_on_the_memory_store_follow_the_model() {
    let rt = model_runtime();
    check(128, &Store::Memory(MemoryStore::new(1_000_000)), &rt, None);
}

#[test]
fn attempts_in_flight_on_redis_follow_the_model() {
    let server = RedisServer::start();
    let rt = model_runtime();
    let store = rt.block_on(redis_store(
        &server,
        Duration::from_secs(2),
        ClockSource::Local,
    ));
    check(48, &store, &rt, Some(&server));
}

/// A slot freed in the very call that decides the next attempt is free for it: the script
/// removes the leases a call's settlements free (one `ZREM` per set) before it counts the set.
#[tokio::test]
async fn a_slot_freed_in_the_deciding_call_is_free_for_that_decision() {
    let server = RedisServer::start();
    let store = redis_store(&server, Duration::from_secs(2), ClockSource::Local).await;
    let set = route();
    let bases = bases(&unique_prefix("inflight-same-call"), "api", "k");
    let mut held = Vec::new();
    for i in 0..SLOTS as u64 {
        let d = reserve(&store, &set, &bases, Some(T0 + i)).await;
        assert!(d.allowed(), "attempt {i} takes a free slot");
        held.push(d);
    }
    let full = reserve(&store, &set, &bases, Some(T0 + 10)).await;
    assert!(!full.allowed(), "every slot is taken");

    let calls = server.decision_calls();
    // queued at once (not awaited): it rides ahead of the next decision, in the same call
    let freed = store.settle(Settlement {
        limits: set.clone(),
        bases: bases.to_vec(),
        receipt: held[0].receipt.clone().expect("a reservation"),
        refund: vec![0],
        confirm: vec![],
        unanswered: vec![],
        reset: vec![],
        settle_to: vec![],
        at_us: None,
        tags: vec![],
    });
    let next = reserve(&store, &set, &bases, Some(T0 + 20)).await;
    freed.await.expect("the store settles");
    assert_eq!(
        server.decision_calls() - calls,
        1,
        "the refund and the decision went in one call"
    );
    assert!(next.allowed(), "the slot freed ahead of it is free");
    assert_eq!(next.limits[0].used as usize, SLOTS);
}

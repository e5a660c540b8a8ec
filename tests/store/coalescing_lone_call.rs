//! The first timing promise of coalescing (README, "Which algorithm" and "The traffic path"), asserted through the order in
//! which Redis decides, never through a clock: a lone decision is a call of its own, and the
//! decisions that arrive while a call is out share the next one.
//!
//! Order is read from Redis itself: requests on one hot key are told how many charges came before
//! theirs (`used`), `INFO commandstats` counts the calls Redis ran, and `CLIENT PAUSE WRITE` holds
//! a call on the wire (`CLIENT LIST` shows it postponed) while the test queues more. That a lone
//! decision is sent at once instead of waiting for company (no batching window) is the lane's
//! queue rule (`may_send`), unit-tested in `src/store/redis/lane.rs`. The other timing promises
//! are in `coalescing_request_priority.rs` and `coalescing_killed_redis.rs`.

use crate::support;

use std::time::Duration;

use slidegate::config::ClockSource;
use slidegate::store::{Answer, DecisionRequest};
use support::coalescing::{calls, pause, resume, route, used, wait_for_postponed_call};
use support::redis::RedisServer;
use support::resp::RespConn;
use support::store::{bases, limit_sets, redis_store};
use support::unique_prefix;

/// A lone decision goes out at once as a call of its own: one after the other, each decision is
/// exactly one decision call (`EVALSHA` or `FCALL`). While one is out (held by a paused Redis),
/// the decisions that arrive queue, and go together in the next call once it is answered: two calls for six decisions,
/// decided in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_decision_is_a_call_of_its_own_and_later_ones_share_the_next() {
    const N: u64 = 50;
    let server = RedisServer::start_async().await;
    let store = redis_store(&server, Duration::from_secs(30), ClockSource::Redis).await;
    let sets = limit_sets(&route(1000));
    let key = bases(&unique_prefix("lone"), "r", "hot");
    let request = DecisionRequest::charge(&sets[0], &key, 1);
    let mut watcher = RespConn::connect(server.port).await;

    for i in 1..=N {
        let before = calls(&mut watcher).await;
        assert_eq!(used(store.decide(request).await), i);
        assert_eq!(
            calls(&mut watcher).await - before,
            1,
            "decision {i} alone: one call"
        );
    }

    let before = calls(&mut watcher).await;
    pause(&mut watcher).await;
    let first = store.submit(request);
    wait_for_postponed_call(&mut watcher).await;
    let queued: Vec<Answer> = (0..5).map(|_| store.submit(request)).collect();
    resume(&mut watcher).await;
    assert_eq!(used(first.await), N + 1, "the first went out alone");
    for (j, answer) in queued.into_iter().enumerate() {
        assert_eq!(used(answer.await), N + 2 + j as u64, "in arrival order");
    }
    assert_eq!(
        calls(&mut watcher).await - before,
        2,
        "the first decision alone, then the five that queued behind it in one call"
    );
}

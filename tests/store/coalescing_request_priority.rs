//! A request does not queue behind a batch (README, "Which algorithm" and "The traffic path"): a request (the proxy path,
//! `Store::submit`) submitted after a batch's decisions (`/v1/decisions`, `Store::decide_many`)
//! were queued goes in the lane's next call, ahead of the batch's remaining decisions, on the store
//! and through a gateway.
//!
//! Asserted through the order in which Redis decides, never through a clock: requests on one hot
//! key are told how many charges came before theirs (`used`, `remaining`), `INFO commandstats`
//! counts the calls Redis ran, and `CLIENT PAUSE WRITE` holds the batch's calls on the wire while
//! the request travels to the lane.

use crate::support;

use std::time::Duration;

use futures_util::FutureExt;
use slidegate::config::ClockSource;
use slidegate::store::DecisionRequest;
use support::coalescing::{
    calls, pause, resume, route, start_batch, used, wait_for_calls, BATCH_IN_FLIGHT, PER_CALL,
};
use support::gateway::{self, config};
use support::http::HttpClient;
use support::redis::RedisServer;
use support::resp::RespConn;
use support::store::{bases, limit_sets, redis_store};
use support::{unique_prefix, upstream};

/// A decision submitted after a batch of 40 calls was queued on the same lane goes in the
/// lane's next call, ahead of the batch's remaining decisions: at most the calls already out
/// (two) are decided before it. Redis is paused from before the batch until the request is
/// queued, so a slow test thread cannot let more calls out first. Every 64th decision of the batch is on the request's key, so
/// the request's `used` says how many of them came first; queued behind the batch it would come
/// after all 160.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_goes_ahead_of_a_batch_queued_before_it() {
    const CALLS: usize = 40;
    const EVERY: usize = 64;
    let server = RedisServer::start_async().await;
    let store = redis_store(&server, Duration::from_secs(30), ClockSource::Redis).await;
    let sets = limit_sets(&route(10_000));
    let prefix = unique_prefix("ahead");
    let keys: Vec<Vec<String>> = (0..CALLS * PER_CALL)
        .map(|i| {
            let key = if i % EVERY == EVERY - 1 {
                "shared".to_string()
            } else {
                format!("k{i}")
            };
            bases(&prefix, "r", &key)
        })
        .collect();
    let requests: Vec<DecisionRequest<'_>> = keys
        .iter()
        .map(|b| DecisionRequest::charge(&sets[0], b, 1))
        .collect();
    let shared = bases(&prefix, "r", "shared");

    // Redis answers nothing until the request is queued, so the lane cannot get past its first
    // calls however long this thread waits for a core: the test asserts an order, not a race.
    let mut watcher = RespConn::connect(server.port).await;
    pause(&mut watcher).await;
    // The first poll of the batch queues all of its decisions on the lane; the request is
    // queued right after it.
    let mut batch = Box::pin(store.decide_many(&requests, None));
    assert!(
        (&mut batch).now_or_never().is_none(),
        "Redis answered while paused"
    );
    let request = store.submit(DecisionRequest::charge(&sets[0], &shared, 1));
    resume(&mut watcher).await;

    let request_used = used(request.await);
    let answers = batch.await;
    let mut shared_used: Vec<u64> = (EVERY - 1..answers.len())
        .step_by(EVERY)
        .map(|i| used(answers[i].clone()))
        .collect();
    let batch_shared = shared_used.len() as u64;
    shared_used.push(request_used);
    shared_used.sort_unstable();
    assert_eq!(
        shared_used,
        (1..=batch_shared + 1).collect::<Vec<_>>(),
        "one charge each on the shared key, in some order"
    );
    let before_it = request_used - 1;
    let at_most = (BATCH_IN_FLIGHT * PER_CALL / EVERY) as u64;
    assert!(
        before_it <= at_most,
        "{before_it} of the batch's {batch_shared} decisions on the key came before the \
         request (at most {at_most}: those of the calls already out)"
    );
}

/// The same through a gateway: a proxy request sent while a `/v1/decisions` batch of 10,000
/// keys is being decided on the same Redis goes ahead of the batch's queued decisions. Redis is
/// paused (the batch's calls held on the wire) while the request travels to the lane, so the
/// batch cannot finish first however slowly the request arrives; every 50th key of the batch is
/// the request's key, so its `X-RateLimit-Remaining` tells how many came first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_request_does_not_wait_behind_a_batch() {
    const KEYS: usize = 10_000;
    const EVERY: usize = 50;
    const LIMIT: u64 = 10_000;
    let redis = RedisServer::start_async().await;
    let up = upstream::start().await;
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"{}\"\ntimeout = \"30s\"",
        redis.url(),
        unique_prefix("behind")
    );
    let route = format!(
        "[[routes]]\nname = \"users\"\npath = \"/*\"\nupstream = \"up\"\n\
         key = [\"header:X-User\"]\non_error = \"deny\"\n\
         [[routes.limits]]\nname = \"per-minute\"\nlimit = {LIMIT}\nwindow = \"1m\"\n"
    );
    let gw = gateway::start(&config(&store, &up.url(), &route)).await;
    let client = HttpClient::default();
    let keys: Vec<String> = (0..KEYS)
        .map(|i| {
            if i % EVERY == EVERY - 1 {
                "shared".to_string()
            } else {
                format!("user-{i}")
            }
        })
        .collect();
    let mut watcher = RespConn::connect(redis.port).await;
    let before = calls(&mut watcher).await;

    // The batch's first call has run: all of it is queued on the lane. Hold the rest.
    let batch = start_batch(&client, &gw, &keys);
    wait_for_calls(&mut watcher, before + 1).await;
    pause(&mut watcher).await;
    let done_before = (calls(&mut watcher).await - before) as usize;
    let calls_of_batch = KEYS.div_ceil(PER_CALL);
    assert!(
        done_before + BATCH_IN_FLIGHT < calls_of_batch,
        "paused too late: {done_before} of {calls_of_batch} calls done"
    );
    let request = {
        let (client, url) = (client.clone(), gw.url("/x"));
        tokio::spawn(async move { client.get(&url, &[("x-user", "shared")]).await })
    };
    // A generous bound for an in-process request over loopback to reach the lane, while Redis
    // decides nothing.
    tokio::time::sleep(Duration::from_secs(1)).await;
    resume(&mut watcher).await;

    let reply = request.await.unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    let remaining: u64 = reply
        .header("x-ratelimit-remaining")
        .unwrap()
        .parse()
        .unwrap();
    let batch = batch.await.unwrap();
    assert_eq!(batch.status, 200, "{}", batch.body);
    let results = batch.json()["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), KEYS);
    let mut shared_remaining: Vec<u64> = results
        .iter()
        .filter(|r| r["key"] == "shared")
        .map(|r| {
            assert_eq!(r["allowed"], true, "{r}");
            r["remaining"].as_u64().unwrap()
        })
        .collect();
    let batch_shared = shared_remaining.len() as u64;
    assert_eq!(batch_shared as usize, KEYS / EVERY);
    shared_remaining.push(remaining);
    shared_remaining.sort_unstable();
    assert_eq!(
        shared_remaining,
        (LIMIT - batch_shared - 1..LIMIT).collect::<Vec<_>>(),
        "one charge each on the shared key"
    );
    let before_it = LIMIT - 1 - remaining;
    // The batch's decisions that Redis ran before the request's call: the calls done before
    // the pause and those it held on the wire.
    let ahead = (done_before + BATCH_IN_FLIGHT) * PER_CALL;
    let at_most = (0..ahead).filter(|i| i % EVERY == EVERY - 1).count() as u64;
    assert!(
        before_it <= at_most,
        "{before_it} of the batch's {batch_shared} decisions on the key came before the \
         proxy request (at most {at_most})"
    );
}

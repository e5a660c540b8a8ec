//! Watching a Redis lane from Redis itself, for the timing tests of coalescing: the lane's bounds,
//! the `EVALSHA` calls Redis has run (`INFO commandstats`), calls held on the wire by
//! `CLIENT PAUSE WRITE` (`CLIENT LIST` shows them postponed), the units an allowed decision
//! counted, and a `/v1/decisions` batch sent in a task of its own.

use std::time::{Duration, Instant};

use http::Method;
use slidegate::store::Decision;

use super::gateway::{self, TOKEN};
use super::http::{HttpClient, Reply};
use super::redis::Resp;
use super::resp::RespConn;

/// Decisions one call carries at most (`MAX_PER_CALL` of `src/store/redis/lane.rs`).
pub const PER_CALL: usize = 256;

/// Calls a lane keeps out at once while a batch fills them (`MAX_BATCH_IN_FLIGHT`).
pub const BATCH_IN_FLIGHT: usize = 2;

/// One route `r`, every key `limit` per minute (sliding_log).
pub fn route(limit: u64) -> String {
    format!(
        "[[routes]]\nname = \"r\"\npath = \"/*\"\nupstream = \"up\"\n\
         [[routes.limits]]\nname = \"m\"\nlimit = {limit}\nwindow = \"1m\"\n"
    )
}

/// The decision calls (`EVALSHA` and `FCALL`) Redis has run (postponed ones are not counted
/// until they run).
pub async fn calls(conn: &mut RespConn) -> i64 {
    super::redis::decision_calls_in(&conn.cmd(&["INFO", "commandstats"]).await)
}

/// Waits (10 s at most, polling) until Redis has run at least `n` `EVALSHA` calls.
pub async fn wait_for_calls(conn: &mut RespConn, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let done = calls(conn).await;
        if done >= n {
            return;
        }
        assert!(Instant::now() < deadline, "Redis ran {done} calls, not {n}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Stops Redis from running scripts (`CLIENT PAUSE ... WRITE`; `INFO` and `CLIENT` still
/// answer) until [`resume`], 60 s at most.
pub async fn pause(conn: &mut RespConn) {
    let reply = conn.cmd(&["CLIENT", "PAUSE", "60000", "WRITE"]).await;
    assert_eq!(reply, Resp::Simple("OK".into()));
}

pub async fn resume(conn: &mut RespConn) {
    let reply = conn.cmd(&["CLIENT", "UNPAUSE"]).await;
    assert_eq!(reply, Resp::Simple("OK".into()));
}

/// Waits (10 s at most, polling) until a paused Redis holds an `EVALSHA` on the wire: a client
/// postponed by the pause (`flags=b`) whose command is `evalsha`.
pub async fn wait_for_postponed_call(conn: &mut RespConn) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let Resp::Bulk(Some(list)) = conn.cmd(&["CLIENT", "LIST"]).await else {
            panic!("CLIENT LIST failed")
        };
        let held = list.lines().any(|l| {
            let fields: Vec<&str> = l.split(' ').collect();
            fields
                .iter()
                .any(|f| f.starts_with("flags=") && f.contains('b'))
                && (fields.contains(&"cmd=evalsha") || fields.contains(&"cmd=fcall"))
        });
        if held {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no EVALSHA reached the paused Redis:\n{list}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The units counted under the route's one limit after `decision`, which must be allowed.
pub fn used(decision: Result<Decision, slidegate::store::StoreError>) -> u64 {
    let decision = decision.expect("the store decides");
    assert!(decision.allowed(), "{decision:?}");
    decision.limits[0].used
}

/// `POST /v1/decisions` for `keys` of route `users`, in a task of its own.
pub fn start_batch(
    client: &HttpClient,
    gw: &gateway::Gateway,
    keys: &[String],
) -> tokio::task::JoinHandle<Reply> {
    let body = serde_json::json!({"route": "users", "keys": keys}).to_string();
    let (client, url) = (client.clone(), gw.admin("/v1/decisions"));
    tokio::spawn(async move {
        let auth = format!("Bearer {TOKEN}");
        client
            .send(Method::POST, &url, &[("authorization", &auth)], &body)
            .await
    })
}

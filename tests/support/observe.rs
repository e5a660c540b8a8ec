//! What tests read back from the outside: series of a gateway's `/metrics` (Prometheus text),
//! Redis's own command counts (`INFO commandstats`), and the units a key prefix holds in Redis
//! (`ZCARD` sums over its `sliding_log` sets), so a test can compare what the gateway says with
//! what Redis recorded.

use super::redis::{RedisServer, Resp};

/// The sum of every series of `name` whose labels include all of `labels` (0 when none does).
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    super::metrics::series(text, name, labels).sum()
}

/// `slidegate_requests_total` per `decision` label of one route, every label listed.
pub const DECISIONS: [&str; 8] = [
    "allowed",
    "rejected",
    "delayed",
    "blocked",
    "shadow_rejected",
    "store_error_allowed",
    "store_error_denied",
    "exempt",
];

/// `slidegate_requests_total{route,decision}` of one route, in the order of [`DECISIONS`].
pub fn decisions(text: &str, route: &str) -> [u64; 8] {
    DECISIONS.map(|d| {
        metric(
            text,
            "slidegate_requests_total",
            &[("route", route), ("decision", d)],
        ) as u64
    })
}

/// The calls Redis counted for one command (`cmdstat_<command>:calls=N` of `INFO commandstats`).
pub fn command_calls(redis: &RedisServer, command: &str) -> i64 {
    let Resp::Bulk(Some(info)) = redis.cmd(&["INFO", "commandstats"]) else {
        panic!("INFO commandstats failed on port {}", redis.port)
    };
    let field = format!("cmdstat_{command}:");
    info.lines()
        .find(|l| l.starts_with(&field))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("a call count"))
}

/// The decision calls Redis has run: `EVALSHA` and `FCALL` together (which one the gateway uses
/// depends on `store.scripts` and the server).
pub fn decision_calls(redis: &RedisServer) -> i64 {
    command_calls(redis, "evalsha") + command_calls(redis, "fcall")
}

/// The decision calls Redis refused or that failed (`EVALSHA` and `FCALL` together).
pub fn decision_failures(redis: &RedisServer) -> i64 {
    command_failures(redis, "evalsha") + command_failures(redis, "fcall")
}

/// The calls Redis refused or that failed for one command (`rejected_calls` + `failed_calls` of
/// `cmdstat_<command>`): a `CROSSSLOT` refusal counts here.
pub fn command_failures(redis: &RedisServer, command: &str) -> i64 {
    let Resp::Bulk(Some(info)) = redis.cmd(&["INFO", "commandstats"]) else {
        panic!("INFO commandstats failed on port {}", redis.port)
    };
    let field = format!("cmdstat_{command}:");
    let Some(line) = info.lines().find(|l| l.starts_with(&field)) else {
        return 0;
    };
    ["rejected_calls=", "failed_calls="]
        .iter()
        .filter_map(|name| line.split(name).nth(1))
        .filter_map(|rest| rest.split(',').next())
        .map(|n| n.trim().parse::<i64>().expect("a call count"))
        .sum()
}

/// Every key under `prefix` on one server (`KEYS`, fine on a test server).
pub fn keys(redis: &RedisServer, prefix: &str) -> Vec<String> {
    match redis.cmd(&["KEYS", &format!("{prefix}:*")]) {
        Resp::Array(items) => items
            .into_iter()
            .map(|k| match k {
                Resp::Bulk(Some(k)) => k,
                other => panic!("unexpected key {other:?}"),
            })
            .collect(),
        other => panic!("KEYS failed: {other:?}"),
    }
}

/// The units recorded under `prefix` on one server: the sum of `ZCARD` over its `sliding_log`
/// sets (`...}#log`, and `...}#log.<class>` for outcome-counted limits), where every allowed
/// request leaves one member per unit it spent, once whatever the number of limits sharing the
/// set. Counters, gcra hashes, block markers and a route's refusal index (`<prefix>:blocked:{..}`,
/// also a sorted set) are skipped.
pub fn units(redis: &RedisServer, prefix: &str) -> i64 {
    keys(redis, prefix)
        .iter()
        .filter(|k| k.ends_with("}#log") || k.contains("}#log."))
        .map(|k| redis.cmd(&["ZCARD", k]).int())
        .sum()
}

//! What each algorithm does to a small daily cap, as README's table says: a client that spends
//! its whole cap at once and then comes back exactly at each Retry-After, under `limit` per
//! `1d` for 1, 3 and 100. Decided by the memory store at chosen instants (both stores decide
//! alike: `tests/decisions/store_equivalence.rs`).

use crate::support;

use std::sync::Arc;

use slidegate::store::{LimitSet, MemoryStore, Store};
use support::store::{bases, decide_at, limit_sets};

const SEC: u64 = 1_000_000;
const HOUR: u64 = 3600 * SEC;
const DAY: u64 = 24 * HOUR;
/// 2023-11-15 00:00:00 UTC: the counter's daily windows turn at midnight UTC.
const MIDNIGHT: u64 = 1_700_006_400 * SEC;

fn daily(algorithm: &str, limit: u64) -> Arc<LimitSet> {
    limit_sets(&format!(
        "[[routes]]\nname = \"r\"\npath = \"/*\"\nupstream = \"up\"\n[[routes.limits]]\nname = \"daily\"\nlimit = {limit}\nwindow = \"1d\"\nalgorithm = \"{algorithm}\"\n"
    ))
    .remove(0)
}

/// The instants a client gets through in `days` when it spends the cap at `start` and then
/// retries exactly at every Retry-After it is given.
async fn allowed_instants(algorithm: &str, limit: u64, start: u64, days: u64) -> Vec<u64> {
    let store = Store::Memory(MemoryStore::new(1_000));
    let set = daily(algorithm, limit);
    let keys = bases("p", "r", "user");
    let (mut now, end) = (start, start + days * DAY);
    let mut allowed = Vec::new();
    for _ in 0..10_000 {
        if now >= end {
            break;
        }
        let d = decide_at(&store, &set, &keys, Some(now), 1).await;
        if d.allowed() {
            allowed.push(now);
        } else {
            now += d.retry_after.as_micros() as u64;
        }
    }
    allowed
}

/// Hours (one decimal) from the cap's last unit to the next one let through.
fn first_wait_hours(allowed: &[u64], limit: usize) -> f64 {
    let gap = allowed[limit] - allowed[limit - 1];
    (gap as f64 / HOUR as f64 * 10.0).round() / 10.0
}

/// The most instants inside any 24-hour window `(t - 1d, t]`.
fn most_in_a_day(allowed: &[u64]) -> usize {
    (0..allowed.len())
        .map(|i| {
            allowed[..=i]
                .iter()
                .filter(|&&t| t + DAY > allowed[i])
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// One row of the table: (algorithm, limit, wait after a 09:00 burst, wait after a 00:01
/// burst, most in any 24 h).
type Row = (&'static str, u64, f64, f64, usize);

const TABLE: [Row; 9] = [
    ("sliding_log", 1, 24.0, 24.0, 1),
    ("sliding_log", 3, 24.0, 24.0, 3),
    ("sliding_log", 100, 24.0, 24.0, 100),
    ("sliding_window_counter", 1, 39.0, 48.0, 1),
    ("sliding_window_counter", 3, 23.0, 32.0, 4),
    ("sliding_window_counter", 100, 15.2, 24.2, 137),
    ("gcra", 1, 24.0, 24.0, 1),
    ("gcra", 3, 8.0, 8.0, 5),
    ("gcra", 100, 0.2, 0.2, 199),
];

#[tokio::test]
async fn small_daily_caps_behave_as_the_readme_table_says() {
    let mut seen = Vec::new();
    for (algorithm, limit, _, _, _) in TABLE {
        let morning = allowed_instants(algorithm, limit, MIDNIGHT + 9 * HOUR, 4).await;
        let night = allowed_instants(algorithm, limit, MIDNIGHT + 60 * SEC, 4).await;
        let n = limit as usize;
        assert!(
            morning.len() > n && night.len() > n,
            "{algorithm} {limit}: the cap never came back"
        );
        seen.push((
            algorithm,
            limit,
            first_wait_hours(&morning, n),
            first_wait_hours(&night, n),
            most_in_a_day(&morning).max(most_in_a_day(&night)),
        ));
    }
    for row in &seen {
        eprintln!("{row:?}");
    }
    assert_eq!(seen, TABLE.to_vec());
}

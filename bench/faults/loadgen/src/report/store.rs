//! The counts in Redis against what the store allowed: `--zcard` (lines `KEY COUNT`, the
//! entries Redis holds per key after the run) against the run's `keys.tsv`.

use std::collections::HashMap;

use super::records::read_lines;
use super::thousands;

/// What Redis lost of the requests the store allowed.
pub struct Lost {
    /// For the Markdown row: `LOST of ALLOWED`, or `-` without `--zcard`.
    pub text: String,
    /// For the list: the whole comparison, or empty without `--zcard`.
    pub detail: String,
}

/// The comparison, summed over the keys of `keys.tsv`.
#[derive(Default)]
struct Counts {
    /// Requests the store allowed.
    decided: u64,
    /// Allowed requests missing from Redis.
    lost: u64,
    /// Entries in Redis beyond the requests the store allowed.
    over: u64,
    /// Keys whose count in Redis is below a count Redis once reported.
    below: u64,
    /// Keys missing some allowed request.
    keys_lost: u64,
}

impl Lost {
    /// Nothing known (no `--zcard`).
    pub fn unknown() -> Lost {
        Lost {
            text: "-".to_string(),
            detail: String::new(),
        }
    }
}

/// Compares the counts of the file `zcard` with the `keys.tsv` of the run in `dir`.
pub fn lost(zcard: &str, dir: &str) -> Lost {
    let zcard = read_zcard(zcard);
    let c = compare(&zcard, dir);
    Lost {
        text: format!("{} of {}", c.lost, thousands(c.decided as f64)),
        detail: format!(
            "Redis holds, per key, the entries of the requests the store allowed: {} allowed request(s) missing from Redis over {} key(s); {} entrie(s) more than the 200s the store decided (requests charged in Redis whose client got another answer: on_error because the store answered after store.timeout, or a 502/504 from the upstream); {} key(s) whose count in Redis is below a count Redis once reported",
            c.lost, c.keys_lost, c.over, c.below
        ),
    }
}

/// The entries per key in the file `path` (a key listed twice is summed).
fn read_zcard(path: &str) -> HashMap<String, u64> {
    let mut zcard: HashMap<String, u64> = HashMap::new();
    for line in read_lines(path) {
        let mut f = line.split_whitespace();
        if let (Some(k), Some(v)) = (f.next(), f.next().and_then(|v| v.parse::<u64>().ok())) {
            *zcard.entry(k.to_string()).or_default() += v;
        }
    }
    zcard
}

/// Each key of `keys.tsv` (allowed, highest count reported) against its entries in Redis.
fn compare(zcard: &HashMap<String, u64>, dir: &str) -> Counts {
    let mut c = Counts::default();
    for line in read_lines(&format!("{dir}/keys.tsv")) {
        let f: Vec<&str> = line.split('\t').collect();
        let (Some(key), Some(d), Some(m)) = (
            f.first(),
            f.get(1).and_then(|v| v.parse::<u64>().ok()),
            f.get(2).and_then(|v| v.parse::<u64>().ok()),
        ) else {
            continue;
        };
        let z = zcard.get(*key).copied().unwrap_or(0);
        c.decided += d;
        if d > z {
            c.lost += d - z;
            c.keys_lost += 1;
        } else {
            c.over += z - d;
        }
        if z < m {
            c.below += 1;
        }
    }
    c
}

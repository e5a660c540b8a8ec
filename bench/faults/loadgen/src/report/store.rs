//! The counts in Redis against what the store allowed: `--zcard` (lines `KEY COUNT`, the
//! entries Redis holds per key after the run) against the run's `keys.tsv`, over every key the
//! store allowed a request of, and apart over those it allowed one of after the fault (from
//! `requests.tsv`): a check that holds only because nothing was allowed after the fault must
//! say so.

use std::collections::HashMap;

use super::records::{read_lines, Run};
use super::thousands;
use crate::Outcome;

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
    /// Keys checked: those the store allowed a request of.
    keys: u64,
    /// The same, over the keys allowed a request after the fault.
    after: After,
}

/// The comparison over the keys allowed a request after the fault.
#[derive(Default)]
struct After {
    /// Requests the store allowed after the fault.
    allowed: u64,
    /// Allowed requests (over the whole run) missing from Redis on these keys.
    lost: u64,
    /// Keys checked.
    keys: u64,
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

/// Compares the counts of the file `zcard` with the `keys.tsv` of the run in `dir`, and apart
/// over the keys `run` allowed a request of after its fault.
pub fn lost(zcard: &str, dir: &str, run: &Run) -> Lost {
    let zcard = read_zcard(zcard);
    let c = compare(&zcard, dir, &allowed_after_fault(run));
    let after = match run.fault_at {
        Some(_) => format!(
            " (after the fault: {} allowed on {} keys, {} missing there)",
            thousands(c.after.allowed as f64),
            thousands(c.after.keys as f64),
            c.after.lost
        ),
        None => String::new(),
    };
    Lost {
        text: format!(
            "{} of {} over {} keys{after}",
            c.lost,
            thousands(c.decided as f64),
            thousands(c.keys as f64)
        ),
        detail: format!(
            "Redis holds, per key, the entries of the requests the store allowed: {} allowed request(s) missing from Redis over {} key(s), of {} key(s) checked{after}; {} entrie(s) more than the 200s the store decided (requests charged in Redis whose client got another answer: on_error because the store answered after store.timeout, or a 502/504 from the upstream); {} key(s) whose count in Redis is below a count Redis once reported",
            c.lost, c.keys_lost, c.keys, c.over, c.below
        ),
    }
}

/// Per key, the requests the store allowed from the fault on (none without a fault, or in a
/// run recorded without keys).
fn allowed_after_fault(run: &Run) -> HashMap<&str, u64> {
    let mut after: HashMap<&str, u64> = HashMap::new();
    let Some(fault) = run.fault_at else {
        return after;
    };
    for r in &run.requests {
        if r.start_ms >= fault && r.outcome == Outcome::Decided && !r.key.is_empty() {
            *after.entry(r.key.as_str()).or_default() += 1;
        }
    }
    after
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

/// Each key of `keys.tsv` (allowed, highest count reported) against its entries in Redis; the
/// keys of `after` (allowed after the fault) are also summed apart.
fn compare(zcard: &HashMap<String, u64>, dir: &str, after: &HashMap<&str, u64>) -> Counts {
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
        c.keys += u64::from(d > 0);
        if let Some(&n) = after.get(*key) {
            c.after.allowed += n;
            c.after.keys += 1;
            c.after.lost += d.saturating_sub(z);
        }
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

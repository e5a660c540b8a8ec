//! The `run` command: the paced keep-alive load, one task per connection on one thread, and
//! what it writes into `--out` (`meta`, `requests.tsv`, `keys.tsv`, `skipped`).

mod client;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::{die, Opts, Outcome, ROUTES};
use client::{request, Answer, Conn};

/// The load asked for on the command line.
struct Load {
    /// The gateway's address (`--base`).
    addr: SocketAddr,
    /// The `Host` header: `--base` without its scheme.
    host: String,
    /// Requests per second over all connections (`--rate`).
    rate: f64,
    /// Keep-alive connections (`--conns`).
    conns: u64,
    /// How long the schedule lasts (`--seconds`).
    total: Duration,
    /// Ordinary users `u1`..`uN` (`--users`).
    users: u32,
    /// Hot users (`--hot`).
    hot: Vec<String>,
    /// The share of requests from a hot user (`--hot-share`).
    hot_share: f64,
    /// The routes' limit (`--limit`): the count the store reports is `limit - remaining`.
    limit: u64,
    /// How long a request may take before it counts as a timeout (`--timeout-ms`).
    timeout: Duration,
}

/// One request as recorded.
struct Rec {
    /// When it was sent, from the start.
    start_us: u64,
    /// How long its answer took.
    latency_us: u64,
    /// Its route's number in `ROUTES`.
    route: u8,
    /// Its user's id (`user_name`).
    user: u32,
    /// What it got.
    outcome: Outcome,
    /// Its status (0 without an answer).
    status: u16,
}

/// Per key (route, user id): requests the store allowed, highest count it reported.
type Tally = HashMap<(u8, u32), (u64, u64)>;

/// What the connections recorded.
#[derive(Default)]
struct Recorded {
    /// Every request sent.
    records: Vec<Rec>,
    /// What the store said per key.
    tally: Tally,
    /// Requests of the schedule not sent (more than 100 ms behind).
    skipped: u64,
}

/// The `run` command: sends the load, then writes down what it got.
pub fn run(opts: &Opts) {
    let load = Arc::new(Load::from_opts(opts));
    let out = PathBuf::from(opts.req("out"));
    let key_prefix = opts.get("key-prefix").unwrap_or("sgf");
    std::fs::create_dir_all(&out).unwrap_or_else(|e| die(&format!("{}: {e}", out.display())));

    let mut recorded = drive(&load, &out);
    recorded.records.sort_by_key(|r| r.start_us);
    write_requests(&out, &load, key_prefix, &recorded.records);
    write_keys(&out, &load, key_prefix, recorded.tally);
    std::fs::write(out.join("skipped"), format!("{}\n", recorded.skipped))
        .expect("skipped written");
    let dropped = recorded
        .records
        .iter()
        .filter(|r| r.outcome.dropped())
        .count();
    eprintln!(
        "faults-load: {} requests in {:.1} s, {} dropped, {} not sent (more than 100 ms behind)",
        recorded.records.len(),
        load.total.as_secs_f64(),
        dropped,
        recorded.skipped
    );
}

impl Load {
    /// The load the options ask for (`--base`, `--rate`...); dies on one missing or bad.
    fn from_opts(opts: &Opts) -> Load {
        let base = opts.req("base");
        let authority = base
            .strip_prefix("http://")
            .unwrap_or_else(|| die("--base must be http://HOST:PORT"))
            .trim_end_matches('/');
        let addr: SocketAddr = authority
            .parse()
            .unwrap_or_else(|_| die("--base must be http://IP:PORT"));
        let load = Load {
            addr,
            host: authority.to_string(),
            rate: opts.num("rate", None),
            conns: opts.num("conns", Some(32)),
            total: Duration::from_secs_f64(opts.num("seconds", None)),
            users: opts.num("users", Some(4000)),
            hot: opts
                .get("hot")
                .unwrap_or("")
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            hot_share: opts.num("hot-share", Some(0.0)),
            limit: opts.num("limit", Some(10_000)),
            timeout: Duration::from_millis(opts.num("timeout-ms", Some(5000))),
        };
        if load.rate <= 0.0 || load.conns == 0 || load.users == 0 {
            die("--rate, --conns and --users must be positive");
        }
        load
    }
}

/// Runs every connection's share of the load (writing `meta` as it starts) and gathers what
/// they recorded.
fn drive(load: &Arc<Load>, out: &Path) -> Recorded {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let start = Instant::now();
        write_meta(out, load);
        let tasks: Vec<_> = (0..load.conns)
            .map(|c| tokio::spawn(connection(c, load.clone(), start)))
            .collect();
        let mut recorded = Recorded::default();
        for task in tasks {
            recorded.merge(task.await.expect("a connection task"));
        }
        recorded
    })
}

impl Recorded {
    /// Adds what another connection recorded.
    fn merge(&mut self, mut other: Recorded) {
        self.skipped += other.skipped;
        self.records.append(&mut other.records);
        for (k, (d, m)) in other.tally {
            let e = self.tally.entry(k).or_insert((0, 0));
            e.0 += d;
            e.1 = e.1.max(m);
        }
    }
}

/// Writes `meta`: the wall-clock start and the load asked for.
fn write_meta(out: &Path, load: &Load) {
    let epoch_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_millis();
    let meta = format!(
        "start_epoch_ms={epoch_ms}\nrate={}\nconns={}\nseconds={}\n",
        load.rate,
        load.conns,
        load.total.as_secs_f64()
    );
    std::fs::write(out.join("meta"), meta).expect("meta written");
}

/// Writes `requests.tsv`: per request, start (ms), route, outcome, status, latency (ms), and its
/// Redis key (as `keys.tsv` names it), so the count check can tell the keys allowed after the
/// fault.
fn write_requests(out: &Path, load: &Load, key_prefix: &str, records: &[Rec]) {
    let mut text = String::with_capacity(records.len() * 48);
    for r in records {
        let _ = writeln!(
            text,
            "{:.3}\t{}\t{}\t{}\t{:.3}\t{}",
            r.start_us as f64 / 1000.0,
            ROUTES[r.route as usize],
            r.outcome.name(),
            r.status,
            r.latency_us as f64 / 1000.0,
            redis_key(load, key_prefix, r.route, r.user)
        );
    }
    std::fs::write(out.join("requests.tsv"), text).expect("requests written");
}

/// Writes `keys.tsv`: per Redis key, the requests the store allowed and the highest count it
/// reported.
fn write_keys(out: &Path, load: &Load, key_prefix: &str, tally: Tally) {
    let mut keys = String::new();
    let mut entries: Vec<_> = tally.into_iter().collect();
    entries.sort();
    for ((route, id), (decided, max_used)) in entries {
        let key = redis_key(load, key_prefix, route, id);
        let _ = writeln!(keys, "{key}\t{decided}\t{max_used}");
    }
    std::fs::write(out.join("keys.tsv"), keys).expect("keys written");
}

/// The Redis key of the sliding log of `route` and user `id`.
fn redis_key(load: &Load, key_prefix: &str, route: u8, id: u32) -> String {
    format!(
        "{key_prefix}:{{{}|{}}}#log",
        ROUTES[route as usize],
        user_name(load, id)
    )
}

/// The name of user `id`: `u1`..`uN`, then the hot users.
fn user_name(load: &Load, id: u32) -> String {
    if id < load.users {
        format!("u{}", id + 1)
    } else {
        load.hot[(id - load.users) as usize].clone()
    }
}

/// A small xorshift generator: each connection its own, seeded from its number.
struct Rng(u64);

impl Rng {
    /// Connection `c`'s generator.
    fn for_connection(c: u64) -> Rng {
        Rng(0x9e37_79b9_7f4a_7c15 ^ (c + 1).wrapping_mul(0x2545_f491_4f6c_dd1d))
    }

    /// The next 64 random bits.
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A random number in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One client connection's share of the load: requests c, c + C, c + 2C, ... of the schedule.
async fn connection(c: u64, load: Arc<Load>, start: Instant) -> Recorded {
    let mut rng = Rng::for_connection(c);
    let mut sender: Conn = None;
    let mut recorded = Recorded::default();
    let mut i = 0u64;
    loop {
        let n = i * load.conns + c;
        let due = Duration::from_secs_f64(n as f64 / load.rate);
        if due >= load.total {
            break;
        }
        // More than 100 ms behind (a slow answer held this connection): the slots missed
        // meanwhile are skipped, not sent in a burst that the schedule never asked for.
        let late = start.elapsed().saturating_sub(due);
        if late > Duration::from_millis(100) {
            let next = next_on_time(&load, c, i, start);
            recorded.skipped += next - i;
            i = next;
            continue;
        }
        i += 1;
        tokio::time::sleep_until((start + due).into()).await;
        let route = (n % 2) as u8;
        let id = pick_user(&mut rng, &load);
        let rec = send(&mut sender, &load, (route, id), start, &mut recorded.tally).await;
        recorded.records.push(rec);
    }
    recorded
}

/// Where connection `c`, behind at its `i`-th request, goes on: its first request due now or
/// later, and at least the one after the `i`-th.
fn next_on_time(load: &Load, c: u64, i: u64, start: Instant) -> u64 {
    let now_n = (start.elapsed().as_secs_f64() * load.rate) as u64;
    now_n.saturating_sub(c).div_ceil(load.conns).max(i + 1)
}

/// The user id of a request: a hot user with probability `--hot-share`, else one of
/// `u1`..`uN` at random (hot users' ids follow the N ordinary ones).
fn pick_user(rng: &mut Rng, load: &Load) -> u32 {
    if !load.hot.is_empty() && rng.unit() < load.hot_share {
        load.users + (rng.next() % load.hot.len() as u64) as u32
    } else {
        (rng.next() % load.users as u64) as u32
    }
}

/// Sends the request of `key` (route, user id), within the client's timeout, and records it;
/// what the store said goes into `tally`. Without a whole answer the connection is given up
/// (the next request opens a new one).
async fn send(
    sender: &mut Conn,
    load: &Load,
    key: (u8, u32),
    start: Instant,
    tally: &mut Tally,
) -> Rec {
    let (route, id) = key;
    let user = user_name(load, id);
    let sent = Instant::now();
    let answer = tokio::time::timeout(
        load.timeout,
        request(sender, load, ROUTES[route as usize], &user),
    )
    .await
    .unwrap_or(Err(Outcome::Timeout));
    let latency_us = sent.elapsed().as_micros() as u64;
    let (outcome, status) = match answer {
        Ok(answer) => (classify(&answer, key, load.limit, tally), answer.status),
        Err(outcome) => {
            *sender = None;
            (outcome, 0)
        }
    };
    Rec {
        start_us: sent.duration_since(start).as_micros() as u64,
        latency_us,
        route,
        user: id,
        outcome,
        status,
    }
}

/// The outcome of a whole answer. The count the store reported goes into the key's tally, and
/// so does the request if the store allowed it.
fn classify(answer: &Answer, key: (u8, u32), limit: u64, tally: &mut Tally) -> Outcome {
    if let Some(remaining) = answer.remaining {
        let e = tally.entry(key).or_insert((0, 0));
        e.1 = e.1.max(limit.saturating_sub(remaining));
    }
    match answer.status {
        200 if answer.decided => {
            tally.entry(key).or_insert((0, 0)).0 += 1;
            Outcome::Decided
        }
        200 => Outcome::Open,
        429 => Outcome::Rejected,
        503 => Outcome::Denied,
        502 | 504 => Outcome::Upstream,
        _ => Outcome::Other,
    }
}

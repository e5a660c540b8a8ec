//! The replay of `bench/accuracy`: a bursty synthetic trace (thousands of keys, Pareto-distributed
//! per-key rates, bursts straddling window edges) decided by both algorithms on a real Redis,
//! through the crate's own `RedisStore`, so the real scripts decide. Each request carries its own
//! instant (the `clock = "local"` path), so the trace replays faster than real time. It reports how
//! the sliding window counter's decisions differ from the exact sliding log's, how far the
//! counter over-admits in any window, and the Redis bytes each algorithm keeps per key.
//!
//! `cargo run --release --example accuracy_replay -- --port PORT [--keys N] [--windows N]
//!  [--limit N] [--window-secs N] [--tick-ms N] [--median-share X] [--burst-chance P] [--seed N]`

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use slidegate::config::{Algorithm, Backend, ClockSource, OnError, StoreConfig};
use slidegate::key::{counter_key, decision_base, sorted_set_key};
use slidegate::metrics::Metrics;
use slidegate::store::{DecisionRequest, Limit, LimitSet, RedisStore};

/// The one limit both routes apply.
const LIMIT_NAME: &str = "per-window";
/// Decisions submitted before their answers are awaited (they queue in order on the lane).
const CHUNK: usize = 20_000;
/// Keys whose Redis memory is sampled per algorithm.
const MEMORY_SAMPLES: usize = 500;

/// What the trace looks like; every knob is a flag.
#[derive(Debug, Clone)]
struct Settings {
    port: u16,
    keys: usize,
    windows: u64,
    limit: u64,
    window_secs: u64,
    tick_ms: u64,
    /// The median key's rate as a share of the limit's rate.
    median_share: f64,
    /// Chance that a key bursts at a given window edge.
    burst_chance: f64,
    seed: u64,
}

impl Settings {
    fn from_args() -> Settings {
        let mut s = Settings {
            port: 0,
            keys: 4000,
            windows: 8,
            limit: 50,
            window_secs: 60,
            tick_ms: 10,
            median_share: 0.2,
            burst_chance: 0.15,
            seed: 7,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let value = args
                .next()
                .unwrap_or_else(|| panic!("{flag} needs a value"));
            match flag.as_str() {
                "--port" => s.port = number(&flag, &value),
                "--keys" => s.keys = number(&flag, &value),
                "--windows" => s.windows = number(&flag, &value),
                "--limit" => s.limit = number(&flag, &value),
                "--window-secs" => s.window_secs = number(&flag, &value),
                "--tick-ms" => s.tick_ms = number(&flag, &value),
                "--median-share" => s.median_share = number(&flag, &value),
                "--burst-chance" => s.burst_chance = number(&flag, &value),
                "--seed" => s.seed = number(&flag, &value),
                other => panic!("unknown flag {other}"),
            }
        }
        assert!(s.port != 0, "--port of the Redis to use is required");
        s
    }

    fn window_us(&self) -> u64 {
        self.window_secs * 1_000_000
    }

    /// The trace starts at a window edge, so its windows are the counter's fixed windows.
    fn start_us(&self) -> u64 {
        1_700_000_000_000_000u64.div_ceil(self.window_us()) * self.window_us()
    }

    fn end_us(&self) -> u64 {
        self.start_us() + self.windows * self.window_us()
    }
}

fn number<T: std::str::FromStr>(flag: &str, value: &str) -> T {
    value
        .parse()
        .unwrap_or_else(|_| panic!("{flag}: not a number: {value}"))
}

/// splitmix64: a small deterministic generator, so a seed names a trace.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }

    fn pareto(&mut self, scale: f64, shape: f64) -> f64 {
        scale / (1.0 - self.unit()).powf(1.0 / shape)
    }
}

/// One request of the trace: a key and an instant (µs since the epoch).
#[derive(Debug, Clone, Copy)]
struct Event {
    at: u64,
    key: u32,
}

/// Per-key request rates, Pareto-distributed (shape 1.2): most keys stay well under the limit,
/// a tail goes far over it (capped at 25 times the limit's rate). The scale puts the median key
/// at `median_share` of the limit's rate.
fn key_rates(s: &Settings, rng: &mut Rng) -> Vec<f64> {
    let limit_rate = s.limit as f64 / s.window_secs as f64;
    let shape = 1.2;
    let scale = s.median_share * limit_rate / 2f64.powf(1.0 / shape);
    (0..s.keys)
        .map(|_| rng.pareto(scale, shape).min(25.0 * limit_rate))
        .collect()
}

/// A Poisson stream at `rate` requests per second over the whole trace.
fn steady(s: &Settings, rng: &mut Rng, key: u32, rate: f64, out: &mut Vec<Event>) {
    let mut at = s.start_us() as f64;
    loop {
        at += rng.exponential(1e6 / rate);
        if at >= s.end_us() as f64 {
            return;
        }
        out.push(Event { at: at as u64, key });
    }
}

/// Bursts at window edges: at each inner edge, with `burst_chance`, between half and twice the
/// limit in requests, each within about half a second before or after the edge (the pattern
/// that fools fixed windows, and that the counter's weighting is least sure about).
fn edge_bursts(s: &Settings, rng: &mut Rng, key: u32, out: &mut Vec<Event>) {
    for edge in 1..s.windows {
        if rng.unit() >= s.burst_chance {
            continue;
        }
        let edge_us = (s.start_us() + edge * s.window_us()) as f64;
        let size = (s.limit as f64 * (0.5 + 1.5 * rng.unit())).round() as u64;
        for _ in 0..size {
            let offset = rng.exponential(500_000.0);
            let at = if rng.unit() < 0.5 {
                edge_us - offset - 1.0
            } else {
                edge_us + offset
            };
            out.push(Event { at: at as u64, key });
        }
    }
}

/// The whole trace, on a grid of `tick_ms` (requests of one tick share an instant, so one
/// script call decides them), in time order.
fn trace(s: &Settings) -> Vec<Event> {
    let mut rng = Rng(s.seed);
    let rates = key_rates(s, &mut rng);
    let mut events = Vec::new();
    for (key, &rate) in rates.iter().enumerate() {
        steady(s, &mut rng, key as u32, rate, &mut events);
        edge_bursts(s, &mut rng, key as u32, &mut events);
    }
    let tick = s.tick_ms * 1000;
    for e in &mut events {
        e.at = e.at.clamp(s.start_us(), s.end_us() - 1) / tick * tick;
    }
    events.sort_by_key(|e| e.at);
    events
}

fn limit_set(s: &Settings, algorithm: Algorithm) -> Arc<LimitSet> {
    Arc::new(LimitSet {
        block_ms: 0,
        limits: vec![Limit {
            name: LIMIT_NAME.into(),
            limit: s.limit,
            window_us: s.window_us(),
            algorithm,
        }],
    })
}

/// Every request of the trace, decided in order at its own instant; true where allowed.
async fn replay(
    store: &RedisStore,
    set: &Arc<LimitSet>,
    bases: &[String],
    trace: &[Event],
) -> Vec<bool> {
    let mut allowed = Vec::with_capacity(trace.len());
    for chunk in trace.chunks(CHUNK) {
        let answers: Vec<_> = chunk
            .iter()
            .map(|e| {
                let request = DecisionRequest {
                    limits: set,
                    base: &bases[e.key as usize],
                    cost: 1,
                };
                store.submit(request, Some(e.at))
            })
            .collect();
        for answer in answers {
            allowed.push(answer.await.expect("Redis decides").allowed());
        }
    }
    allowed
}

/// How the counter's decisions differ from the log's, request by request.
#[derive(Debug, Default)]
struct Disagreement {
    requests: u64,
    allowed_by_log: u64,
    allowed_by_counter: u64,
    false_allows: u64,
    false_denies: u64,
}

fn disagreement(counter: &[bool], log: &[bool]) -> Disagreement {
    let mut d = Disagreement {
        requests: counter.len() as u64,
        ..Disagreement::default()
    };
    for (&c, &l) in counter.iter().zip(log) {
        d.allowed_by_log += l as u64;
        d.allowed_by_counter += c as u64;
        d.false_allows += (c && !l) as u64;
        d.false_denies += (!c && l) as u64;
    }
    d
}

/// Keys denied at least once, per algorithm and by one only.
#[derive(Debug, Default)]
struct DeniedKeys {
    by_log: u64,
    by_counter: u64,
    /// Clients the exact limit never stopped and the counter did.
    by_counter_only: u64,
    /// Clients the exact limit stopped and the counter never did.
    by_log_only: u64,
}

fn denied_keys(trace: &[Event], counter: &[bool], log: &[bool]) -> DeniedKeys {
    let mut denied: HashMap<u32, (bool, bool)> = HashMap::new();
    for ((e, &c), &l) in trace.iter().zip(counter).zip(log) {
        let d = denied.entry(e.key).or_default();
        d.0 |= !c;
        d.1 |= !l;
    }
    let count = |f: fn(&(bool, bool)) -> bool| denied.values().filter(|d| f(d)).count() as u64;
    DeniedKeys {
        by_log: count(|d| d.1),
        by_counter: count(|d| d.0),
        by_counter_only: count(|d| d.0 && !d.1),
        by_log_only: count(|d| d.1 && !d.0),
    }
}

/// Admitted requests per (key, window of the trace).
fn admitted_per_window(
    s: &Settings,
    trace: &[Event],
    allowed: &[bool],
) -> HashMap<(u32, u64), u64> {
    let mut out = HashMap::new();
    for (e, _) in trace.iter().zip(allowed).filter(|(_, &a)| a) {
        *out.entry((e.key, (e.at - s.start_us()) / s.window_us()))
            .or_insert(0) += 1;
    }
    out
}

/// The mean rate error: over every (key, window of the trace) in which the log admitted
/// something, |admitted by the counter - admitted by the log| / admitted by the log, averaged.
/// Also how many (key, window) pairs the counter admitted in while the log admitted nothing.
fn mean_rate_error(
    counter: &HashMap<(u32, u64), u64>,
    log: &HashMap<(u32, u64), u64>,
) -> (f64, u64) {
    let (mut sum, mut pairs) = (0.0, 0u64);
    for (slot, &exact) in log {
        let approximate = counter.get(slot).copied().unwrap_or(0);
        sum += (approximate as f64 - exact as f64).abs() / exact as f64;
        pairs += 1;
    }
    let only_counter = counter
        .keys()
        .filter(|slot| !log.contains_key(slot))
        .count() as u64;
    (sum / pairs.max(1) as f64, only_counter)
}

/// The admitted instants of each key, in order.
fn admitted_by_key(trace: &[Event], allowed: &[bool]) -> HashMap<u32, Vec<u64>> {
    let mut out: HashMap<u32, Vec<u64>> = HashMap::new();
    for (e, _) in trace.iter().zip(allowed).filter(|(_, &a)| a) {
        out.entry(e.key).or_default().push(e.at);
    }
    out
}

/// The most requests one key had admitted in any window (t - window, t] of the trace.
fn most_in_any_window(admitted: &[u64], window: u64) -> u64 {
    let (mut first, mut most) = (0, 0);
    for (last, &t) in admitted.iter().enumerate() {
        while admitted[first] + window <= t {
            first += 1;
        }
        most = most.max((last + 1 - first) as u64);
    }
    most
}

/// Over-admission in the worst window of every key, as a share above the limit (0 when never
/// above): the worst over all keys, and the share of keys above 10 %.
fn over_admission(s: &Settings, by_key: &HashMap<u32, Vec<u64>>) -> (f64, f64) {
    let over: Vec<f64> = by_key
        .values()
        .map(|a| (most_in_any_window(a, s.window_us()) as f64 / s.limit as f64 - 1.0).max(0.0))
        .collect();
    let worst = over.iter().copied().fold(0.0, f64::max);
    let above = over.iter().filter(|&&o| o > 0.10).count() as f64 / s.keys as f64;
    (worst, above)
}

/// Over-admission in the worst fixed window of the trace (the counter's own windows).
fn fixed_window_over_admission(s: &Settings, per_window: &HashMap<(u32, u64), u64>) -> f64 {
    let most = per_window.values().copied().max().unwrap_or(0);
    (most as f64 / s.limit as f64 - 1.0).max(0.0)
}

/// Cloudflare's "difference between the real rate and the approximate rate": at every request
/// the counter decided, its estimate (previous * (1 - elapsed / window) + current, from what it
/// had admitted) against the real count of what it had admitted in (t - window, t], as
/// |estimate - real| / real, averaged over the requests where the real count is above 0.
fn mean_estimate_error(s: &Settings, trace: &[Event], allowed: &[bool]) -> f64 {
    let w = s.window_us();
    let mut seen: HashMap<u32, Vec<u64>> = HashMap::new();
    let (mut sum, mut n) = (0.0, 0u64);
    for (e, &a) in trace.iter().zip(allowed) {
        let admitted = seen.entry(e.key).or_default();
        let real = admitted.iter().rev().take_while(|&&t| t + w > e.at).count() as f64;
        if real > 0.0 {
            let index = e.at / w;
            let in_window = |i: u64| admitted.iter().rev().filter(|&&t| t / w == i).count() as f64;
            let elapsed = (e.at - index * w) as f64 / w as f64;
            let estimate = in_window(index - 1) * (1.0 - elapsed) + in_window(index);
            sum += (estimate - real).abs() / real;
            n += 1;
        }
        if a {
            admitted.push(e.at);
            let keep_from = admitted.partition_point(|&t| t / w + 1 < e.at / w);
            admitted.drain(..keep_from);
        }
    }
    sum / n.max(1) as f64
}

/// `MEMORY USAGE key SAMPLES 0` over one connection; `None` for a key that is gone.
struct MemoryProbe {
    reader: BufReader<TcpStream>,
}

impl MemoryProbe {
    fn connect(port: u16) -> MemoryProbe {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("Redis answers");
        MemoryProbe {
            reader: BufReader::new(stream),
        }
    }

    fn bytes(&mut self, key: &str) -> Option<u64> {
        let args = ["MEMORY", "USAGE", key, "SAMPLES", "0"];
        let mut command = format!("*{}\r\n", args.len());
        for a in args {
            command.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.reader
            .get_mut()
            .write_all(command.as_bytes())
            .expect("write to Redis");
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("read from Redis");
        line.trim_end().strip_prefix(':')?.parse().ok()
    }
}

/// Mean bytes per key over up to [`MEMORY_SAMPLES`] keys spread over the key space.
fn bytes_per_key(probe: &mut MemoryProbe, keys: &[String]) -> (f64, usize) {
    let step = (keys.len() / MEMORY_SAMPLES).max(1);
    let sizes: Vec<u64> = keys
        .iter()
        .step_by(step)
        .filter_map(|k| probe.bytes(k))
        .collect();
    (
        sizes.iter().sum::<u64>() as f64 / sizes.len().max(1) as f64,
        sizes.len(),
    )
}

async fn connect(port: u16) -> RedisStore {
    let config = StoreConfig {
        backend: Backend::Redis,
        url: format!("redis://127.0.0.1:{port}"),
        // Decisions queue by the chunk; none should give up while it waits its turn.
        timeout: Duration::from_secs(120),
        on_error: OnError::Deny,
        key_prefix: "accuracy".into(),
        clock: ClockSource::Local,
    };
    let store = RedisStore::connect(&config, &Metrics::new(), &[])
        .await
        .expect("store");
    store
        .wait_until_ready(Duration::from_secs(10))
        .await
        .expect("Redis is ready");
    store
}

/// Everything the run reports.
struct Report {
    decisions: Disagreement,
    keys: DeniedKeys,
    rate_error: f64,
    counter_only_windows: u64,
    estimate_error: f64,
    counter_worst: f64,
    counter_keys_above: f64,
    counter_fixed: f64,
    log_worst: f64,
    log_bytes: (f64, usize),
    counter_bytes: (f64, usize),
    replay_secs: f64,
}

/// The counter's decisions measured against the log's.
fn compare(s: &Settings, trace: &[Event], counter: &[bool], log: &[bool]) -> Report {
    let counter_windows = admitted_per_window(s, trace, counter);
    let log_windows = admitted_per_window(s, trace, log);
    let (rate_error, counter_only_windows) = mean_rate_error(&counter_windows, &log_windows);
    let (counter_worst, counter_keys_above) = over_admission(s, &admitted_by_key(trace, counter));
    Report {
        decisions: disagreement(counter, log),
        keys: denied_keys(trace, counter, log),
        rate_error,
        counter_only_windows,
        estimate_error: mean_estimate_error(s, trace, counter),
        counter_worst,
        counter_keys_above,
        counter_fixed: fixed_window_over_admission(s, &counter_windows),
        log_worst: over_admission(s, &admitted_by_key(trace, log)).0,
        log_bytes: (0.0, 0),
        counter_bytes: (0.0, 0),
        replay_secs: 0.0,
    }
}

fn percent(x: f64) -> String {
    format!("{:.4} %", 100.0 * x)
}

fn print_table(s: &Settings, r: &Report) {
    let d = &r.decisions;
    let share = |n: u64| format!("{} ({n})", percent(n as f64 / d.requests as f64));
    let rows = [
        (
            "requests (keys, windows)".to_string(),
            format!(
                "{} ({}, {} of {} s)",
                d.requests, s.keys, s.windows, s.window_secs
            ),
        ),
        ("limit per window".into(), s.limit.to_string()),
        (
            "allowed by the log / by the counter".into(),
            format!("{} / {}", d.allowed_by_log, d.allowed_by_counter),
        ),
        (
            "wrong decisions (counter vs log)".into(),
            share(d.false_allows + d.false_denies),
        ),
        (
            "false allows (counter allows, log denies)".into(),
            share(d.false_allows),
        ),
        (
            "false denies (counter denies, log allows)".into(),
            share(d.false_denies),
        ),
        (
            "keys denied at least once by the log / by the counter".into(),
            format!("{} / {}", r.keys.by_log, r.keys.by_counter),
        ),
        (
            "keys denied by the counter, never by the log".into(),
            r.keys.by_counter_only.to_string(),
        ),
        (
            "keys denied by the log, never by the counter".into(),
            r.keys.by_log_only.to_string(),
        ),
        (
            "mean rate error (admitted per key and window, counter vs log)".into(),
            percent(r.rate_error),
        ),
        (
            "(key, window) pairs admitted by the counter only".into(),
            r.counter_only_windows.to_string(),
        ),
        (
            "mean estimate error (counter's estimate vs its real count)".into(),
            percent(r.estimate_error),
        ),
        (
            "max over-admission, any window (t - w, t], counter".into(),
            percent(r.counter_worst),
        ),
        (
            "keys over-admitted by more than 10 % in some window, counter".into(),
            percent(r.counter_keys_above),
        ),
        (
            "max over-admission, the counter's fixed windows".into(),
            percent(r.counter_fixed),
        ),
        (
            "max over-admission, any window, log (must be 0)".into(),
            percent(r.log_worst),
        ),
        (
            format!(
                "Redis bytes per key, sliding_log (MEMORY USAGE, {} keys)",
                r.log_bytes.1
            ),
            format!("{:.0}", r.log_bytes.0),
        ),
        (
            format!(
                "Redis bytes per key, sliding_window_counter ({} keys)",
                r.counter_bytes.1
            ),
            format!("{:.0}", r.counter_bytes.0),
        ),
        (
            "replay time, both algorithms at once".into(),
            format!("{:.1} s", r.replay_secs),
        ),
    ];
    println!("| measure | value |");
    println!("| --- | --- |");
    for (measure, value) in rows {
        println!("| {measure} | {value} |");
    }
}

fn print_verdicts(r: &Report) {
    let verdict = |ok: bool| if ok { "PASS" } else { "FAIL" };
    let lines = [
        (
            r.counter_worst <= 0.10,
            "the counter admits at most 10 % above the limit in any window",
            r.counter_worst,
        ),
        (
            r.counter_fixed <= 0.10,
            "the counter admits at most 10 % above the limit in its fixed windows",
            r.counter_fixed,
        ),
        (
            r.log_worst == 0.0,
            "the log never admits above the limit",
            r.log_worst,
        ),
    ];
    println!();
    for (ok, what, worst) in lines {
        println!("{}: {what} (worst {})", verdict(ok), percent(worst));
    }
}

/// The trace replayed through both algorithms at once: (log, counter) decisions, and seconds.
async fn replay_both(
    s: &Settings,
    store: &RedisStore,
    trace: &[Event],
) -> (Vec<bool>, Vec<bool>, f64) {
    let (log_bases, counter_bases) = (bases(s, "log"), bases(s, "counter"));
    let log_set = limit_set(s, Algorithm::SlidingLog);
    let counter_set = limit_set(s, Algorithm::SlidingWindowCounter);
    let started = Instant::now();
    let (log, counter) = tokio::join!(
        replay(store, &log_set, &log_bases, trace),
        replay(store, &counter_set, &counter_bases, trace)
    );
    (log, counter, started.elapsed().as_secs_f64())
}

/// The storage base of every key of `route`.
fn bases(s: &Settings, route: &str) -> Vec<String> {
    (0..s.keys)
        .map(|k| decision_base("accuracy", route, &format!("user-{k}")))
        .collect()
}

/// Bytes per key of both algorithms' Redis keys: (log, counter).
fn memory(s: &Settings) -> ((f64, usize), (f64, usize)) {
    let mut probe = MemoryProbe::connect(s.port);
    let log_keys: Vec<String> = bases(s, "log")
        .iter()
        .map(|b| sorted_set_key(b, LIMIT_NAME))
        .collect();
    let counter_keys: Vec<String> = bases(s, "counter").iter().map(|b| counter_key(b)).collect();
    (
        bytes_per_key(&mut probe, &log_keys),
        bytes_per_key(&mut probe, &counter_keys),
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let s = Settings::from_args();
    let trace = trace(&s);
    eprintln!("trace: {} requests over {} keys", trace.len(), s.keys);
    let store = connect(s.port).await;
    let (log, counter, replay_secs) = replay_both(&s, &store, &trace).await;
    eprintln!("replayed both algorithms in {replay_secs:.1} s");
    let (log_bytes, counter_bytes) = memory(&s);
    let report = Report {
        log_bytes,
        counter_bytes,
        replay_secs,
        ..compare(&s, &trace, &counter, &log)
    };
    print_table(&s, &report);
    print_verdicts(&report);
}

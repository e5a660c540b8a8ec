//! faults-load: the load of `bench/faults/run.sh` and its report (method and definitions in
//! `bench/faults/README.md`).
//!
//! ```text
//! faults-load run --base http://127.0.0.1:PORT --rate R --conns C --seconds S --out DIR
//!     [--users N] [--hot NAME,NAME...] [--hot-share F] [--limit L] [--key-prefix P]
//!     [--timeout-ms T]
//! ```
//! C keep-alive HTTP/1.1 connections send R requests per second in all for S seconds,
//! alternating the paths `/allow/x` (route `allow`, `on_error = "allow"`) and `/deny/x` (route
//! `deny`, `on_error = "deny"`), each with an `X-User` header: one of the hot users with
//! probability F, else `u1`..`uN` at random. Request n (over all connections) is due n/R s after
//! the start; a connection whose previous answer came late sends its next request at once, so a
//! stall lowers the rate instead of piling up requests (wrk2 is not packaged in Debian; hey can
//! pace but sends one fixed request and gives no per-second figures). Every request is recorded
//! with its start time, route, outcome and latency: `DIR/requests.tsv`. `DIR/keys.tsv` has, per
//! Redis key, the requests the store allowed and the highest count the store ever reported for
//! it (`limit - X-RateLimit-Remaining`). `DIR/meta` is written at the start.
//!
//! ```text
//! faults-load slot-users --route R --prefix P --from A --to B --count N
//! ```
//! prints N user names `P1`, `P2`... (comma-separated) whose key `{R|USER}` hashes into the
//! cluster slots A..=B (CRC16 of the hash tag, as Redis Cluster computes it).
//!
//! ```text
//! faults-load report --dir DIR --fault NAME --title TEXT --events FILE --row-out FILE
//!     [--zcard FILE] [--metrics FILE] [--upstream-fault] [--note TEXT] [--peak R]
//! ```
//! prints the per-second chart and the figures of one fault and appends its Markdown row.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

const ROUTES: [&str; 2] = ["allow", "deny"];

/// What one request got.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u8)]
enum Outcome {
    /// 200 whose rate-limit headers say the store decided it.
    Decided = 0,
    /// 200 without rate-limit headers: forwarded because the store failed (`on_error`).
    Open = 1,
    /// 429.
    Rejected = 2,
    /// 503 (the store failed and the route fails closed).
    Denied = 3,
    /// 502 or 504 (the upstream failed).
    Upstream = 4,
    /// Any other status.
    Other = 5,
    /// No connection could be made.
    Connect = 6,
    /// The connection broke before the whole answer arrived.
    Reset = 7,
    /// No whole answer within the client's timeout.
    Timeout = 8,
}

const OUTCOMES: [Outcome; 9] = [
    Outcome::Decided,
    Outcome::Open,
    Outcome::Rejected,
    Outcome::Denied,
    Outcome::Upstream,
    Outcome::Other,
    Outcome::Connect,
    Outcome::Reset,
    Outcome::Timeout,
];

impl Outcome {
    fn name(self) -> &'static str {
        match self {
            Outcome::Decided => "decided",
            Outcome::Open => "fail-open",
            Outcome::Rejected => "429",
            Outcome::Denied => "503",
            Outcome::Upstream => "502/504",
            Outcome::Other => "other",
            Outcome::Connect => "connect-error",
            Outcome::Reset => "reset",
            Outcome::Timeout => "timeout",
        }
    }

    fn from_name(name: &str) -> Option<Outcome> {
        OUTCOMES.iter().copied().find(|o| o.name() == name)
    }

    fn dropped(self) -> bool {
        matches!(self, Outcome::Connect | Outcome::Reset | Outcome::Timeout)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        die("usage: faults-load run|slot-users|report ... (see the top of src/main.rs)");
    };
    let opts = Opts::parse(rest);
    match command.as_str() {
        "run" => run(&opts),
        "slot-users" => slot_users(&opts),
        "report" => report(&opts),
        other => die(&format!("unknown command {other}")),
    }
}

fn die(message: &str) -> ! {
    eprintln!("faults-load: {message}");
    std::process::exit(2);
}

/// `--name value` pairs and `--flag`s.
struct Opts {
    values: HashMap<String, String>,
}

impl Opts {
    fn parse(args: &[String]) -> Opts {
        let mut values = HashMap::new();
        let mut i = 0;
        while i < args.len() {
            let Some(name) = args[i].strip_prefix("--") else {
                die(&format!("unexpected argument {}", args[i]));
            };
            match args.get(i + 1).filter(|v| !v.starts_with("--")) {
                Some(value) => {
                    values.insert(name.to_string(), value.clone());
                    i += 2;
                }
                None => {
                    values.insert(name.to_string(), String::new());
                    i += 1;
                }
            }
        }
        Opts { values }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    fn req(&self, name: &str) -> &str {
        self.get(name)
            .unwrap_or_else(|| die(&format!("--{name} is required")))
    }

    fn num<T: std::str::FromStr>(&self, name: &str, default: Option<T>) -> T {
        match self.get(name) {
            Some(v) => v
                .parse()
                .unwrap_or_else(|_| die(&format!("--{name}: not a number: {v}"))),
            None => default.unwrap_or_else(|| die(&format!("--{name} is required"))),
        }
    }

    fn flag(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }
}

// ------------------------------------------------------------------------------------- run

struct Load {
    addr: SocketAddr,
    host: String,
    rate: f64,
    conns: u64,
    total: Duration,
    users: u32,
    hot: Vec<String>,
    hot_share: f64,
    limit: u64,
    timeout: Duration,
}

/// One request as recorded.
struct Rec {
    start_us: u64,
    latency_us: u64,
    route: u8,
    outcome: Outcome,
    status: u16,
}

/// Per key (route, user id): requests the store allowed, highest count it reported.
type Tally = HashMap<(u8, u32), (u64, u64)>;

fn run(opts: &Opts) {
    let base = opts.req("base");
    let authority = base
        .strip_prefix("http://")
        .unwrap_or_else(|| die("--base must be http://HOST:PORT"))
        .trim_end_matches('/');
    let addr: SocketAddr = authority
        .parse()
        .unwrap_or_else(|_| die("--base must be http://IP:PORT"));
    let load = Arc::new(Load {
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
    });
    if load.rate <= 0.0 || load.conns == 0 || load.users == 0 {
        die("--rate, --conns and --users must be positive");
    }
    let out = std::path::PathBuf::from(opts.req("out"));
    let key_prefix = opts.get("key-prefix").unwrap_or("sgf").to_string();
    std::fs::create_dir_all(&out).unwrap_or_else(|e| die(&format!("{}: {e}", out.display())));

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let (records, tally, skipped) = runtime.block_on(async {
        let start = Instant::now();
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
        let tasks: Vec<_> = (0..load.conns)
            .map(|c| tokio::spawn(connection(c, load.clone(), start)))
            .collect();
        let mut records = Vec::new();
        let mut tally = Tally::new();
        let mut skipped = 0;
        for task in tasks {
            let (mut r, t, s) = task.await.expect("a connection task");
            skipped += s;
            records.append(&mut r);
            for (k, (d, m)) in t {
                let e = tally.entry(k).or_insert((0, 0));
                e.0 += d;
                e.1 = e.1.max(m);
            }
        }
        (records, tally, skipped)
    });

    let mut text = String::with_capacity(records.len() * 24);
    let mut sorted = records;
    sorted.sort_by_key(|r| r.start_us);
    for r in &sorted {
        let _ = writeln!(
            text,
            "{:.3}\t{}\t{}\t{}\t{:.3}",
            r.start_us as f64 / 1000.0,
            ROUTES[r.route as usize],
            r.outcome.name(),
            r.status,
            r.latency_us as f64 / 1000.0
        );
    }
    std::fs::write(out.join("requests.tsv"), text).expect("requests written");
    let mut keys = String::new();
    let mut entries: Vec<_> = tally.into_iter().collect();
    entries.sort();
    for ((route, id), (decided, max_used)) in entries {
        let _ = writeln!(
            keys,
            "{key_prefix}:{{{}|{}}}#log\t{decided}\t{max_used}",
            ROUTES[route as usize],
            user_name(&load, id)
        );
    }
    std::fs::write(out.join("keys.tsv"), keys).expect("keys written");
    std::fs::write(out.join("skipped"), format!("{skipped}\n")).expect("skipped written");
    let dropped = sorted.iter().filter(|r| r.outcome.dropped()).count();
    eprintln!(
        "faults-load: {} requests in {:.1} s, {} dropped, {} not sent (more than 100 ms behind)",
        sorted.len(),
        load.total.as_secs_f64(),
        dropped,
        skipped
    );
}

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
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One client connection's share of the load: requests c, c + C, c + 2C, ... of the schedule.
async fn connection(c: u64, load: Arc<Load>, start: Instant) -> (Vec<Rec>, Tally, u64) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (c + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mut sender: Option<SendRequest<Empty<Bytes>>> = None;
    let mut records = Vec::new();
    let mut tally = Tally::new();
    let mut skipped = 0u64;
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
            let now_n = (start.elapsed().as_secs_f64() * load.rate) as u64;
            let next = now_n.saturating_sub(c).div_ceil(load.conns).max(i + 1);
            skipped += next - i;
            i = next;
            continue;
        }
        i += 1;
        tokio::time::sleep_until((start + due).into()).await;
        let route = (n % 2) as u8;
        let id = if !load.hot.is_empty() && rng.unit() < load.hot_share {
            load.users + (rng.next() % load.hot.len() as u64) as u32
        } else {
            (rng.next() % load.users as u64) as u32
        };
        let user = user_name(&load, id);
        let sent = Instant::now();
        let answer = tokio::time::timeout(
            load.timeout,
            request(&mut sender, &load, ROUTES[route as usize], &user),
        )
        .await
        .unwrap_or(Err(Outcome::Timeout));
        let latency_us = sent.elapsed().as_micros() as u64;
        let (outcome, status) = match answer {
            Ok((status, decided, remaining)) => {
                if let Some(remaining) = remaining {
                    let e = tally.entry((route, id)).or_insert((0, 0));
                    e.1 = e.1.max(load.limit.saturating_sub(remaining));
                }
                let outcome = match status {
                    200 if decided => {
                        tally.entry((route, id)).or_insert((0, 0)).0 += 1;
                        Outcome::Decided
                    }
                    200 => Outcome::Open,
                    429 => Outcome::Rejected,
                    503 => Outcome::Denied,
                    502 | 504 => Outcome::Upstream,
                    _ => Outcome::Other,
                };
                (outcome, status)
            }
            Err(outcome) => {
                sender = None;
                (outcome, 0)
            }
        };
        records.push(Rec {
            start_us: sent.duration_since(start).as_micros() as u64,
            latency_us,
            route,
            outcome,
            status,
        });
    }
    (records, tally, skipped)
}

/// Sends one GET on the connection (opening one when there is none or it was closed) and
/// reads the whole answer: status, whether the store decided it, `X-RateLimit-Remaining`.
async fn request(
    sender: &mut Option<SendRequest<Empty<Bytes>>>,
    load: &Load,
    route: &str,
    user: &str,
) -> Result<(u16, bool, Option<u64>), Outcome> {
    // A connection the server closed between requests (keep-alive ended) is replaced silently:
    // no request was in flight on it.
    let usable = match sender.as_mut() {
        Some(s) => s.ready().await.is_ok(),
        None => false,
    };
    if !usable {
        *sender = Some(connect(load).await?);
    }
    let s = sender.as_mut().expect("a connection");
    s.ready().await.map_err(|_| Outcome::Reset)?;
    let req = http::Request::get(format!("/{route}/x"))
        .header(http::header::HOST, &load.host)
        .header("x-user", user)
        .body(Empty::new())
        .expect("a valid request");
    let response = s.send_request(req).await.map_err(|_| Outcome::Reset)?;
    let status = response.status().as_u16();
    let decided = response.headers().contains_key("ratelimit");
    let remaining = response
        .headers()
        .get("x-ratelimit-remaining")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    response
        .into_body()
        .collect()
        .await
        .map_err(|_| Outcome::Reset)?;
    Ok((status, decided, remaining))
}

async fn connect(load: &Load) -> Result<SendRequest<Empty<Bytes>>, Outcome> {
    let stream = tokio::net::TcpStream::connect(load.addr)
        .await
        .map_err(|_| Outcome::Connect)?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|_| Outcome::Connect)?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

// ------------------------------------------------------------------------------ slot-users

/// CRC16/XMODEM, the hash of Redis Cluster's key slots.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

fn slot_users(opts: &Opts) {
    let route = opts.req("route");
    let prefix = opts.req("prefix");
    let from: u16 = opts.num("from", None);
    let to: u16 = opts.num("to", None);
    let count: usize = opts.num("count", Some(1));
    let mut found = Vec::new();
    for i in 1u64..50_000_000 {
        let user = format!("{prefix}{i}");
        let slot = crc16(format!("{route}|{user}").as_bytes()) % 16384;
        if (from..=to).contains(&slot) {
            found.push(user);
            if found.len() == count {
                println!("{}", found.join(","));
                return;
            }
        }
    }
    die("no such users found");
}

// ---------------------------------------------------------------------------------- report

struct Request {
    start_ms: f64,
    route: usize,
    outcome: Outcome,
    latency_ms: f64,
}

struct Event {
    at_ms: f64,
    kind: String,
    text: String,
}

fn read_lines(path: &str) -> Vec<String> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| die(&format!("{path}: {e}")));
    BufReader::new(file).lines().map_while(Result::ok).collect()
}

fn report(opts: &Opts) {
    let dir = opts.req("dir");
    let fault = opts.req("fault");
    let title = opts.get("title").unwrap_or(fault);
    let upstream_fault = opts.flag("upstream-fault");
    let mut meta = HashMap::new();
    for line in read_lines(&format!("{dir}/meta")) {
        if let Some((k, v)) = line.split_once('=') {
            meta.insert(k.to_string(), v.to_string());
        }
    }
    let meta_num = |k: &str| -> f64 {
        meta.get(k)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| die(&format!("meta: no {k}")))
    };
    let start_epoch = meta_num("start_epoch_ms");
    let seconds = meta_num("seconds");
    let rate = meta_num("rate");
    let conns = meta_num("conns");

    let requests: Vec<Request> = read_lines(&format!("{dir}/requests.tsv"))
        .iter()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let route_name = *f.get(1)?;
            Some(Request {
                start_ms: f.first()?.parse().ok()?,
                route: ROUTES.iter().position(|r| *r == route_name)?,
                outcome: Outcome::from_name(f.get(2)?)?,
                latency_ms: f.get(4)?.parse().ok()?,
            })
        })
        .collect();
    let events: Vec<Event> = read_lines(opts.req("events"))
        .iter()
        .filter_map(|l| {
            let mut f = l.splitn(3, ' ');
            let at: f64 = f.next()?.parse().ok()?;
            Some(Event {
                at_ms: at - start_epoch,
                kind: f.next()?.to_string(),
                text: f.next().unwrap_or("").to_string(),
            })
        })
        .collect();
    let fault_at = events.iter().find(|e| e.kind == "fault").map(|e| e.at_ms);
    let back_at = events.iter().find(|e| e.kind == "back").map(|e| e.at_ms);

    // A request is answered correctly when the store decided it (and, in the upstream fault,
    // when the upstream's answer came back too: only 200s decided by the store).
    let correct = |r: &Request| match r.outcome {
        Outcome::Decided => true,
        Outcome::Rejected => !upstream_fault,
        _ => false,
    };
    // What the route's on_error (and, in the upstream fault, the dead upstream) cannot explain.
    let unexplained = |r: &Request| -> bool {
        // A 502/504 whose answer came after the upstream was killed (the request may have been
        // sent just before).
        let upstream_down =
            upstream_fault && fault_at.is_some_and(|f| r.start_ms + r.latency_ms >= f);
        match (r.outcome, r.route) {
            (Outcome::Decided, _) => false,
            (Outcome::Open, 0) => false,
            (Outcome::Denied, 1) => false,
            (Outcome::Upstream, _) => !upstream_down,
            _ => true,
        }
    };

    // ---- per second
    let n_secs = seconds.ceil() as usize;
    let mut per_sec = vec![[0u64; 9]; n_secs.max(1)];
    let mut max_lat = vec![0f64; n_secs.max(1)];
    for r in &requests {
        let s = ((r.start_ms / 1000.0) as usize).min(n_secs.max(1) - 1);
        per_sec[s][r.outcome as usize] += 1;
        max_lat[s] = max_lat[s].max(r.latency_ms);
    }
    let mut out = String::new();
    let _ = writeln!(out, "### {fault}: {title}");
    let _ = writeln!(out);
    let peak = opts.get("peak").and_then(|p| p.parse::<f64>().ok());
    let _ = writeln!(
        out,
        "load: {} req/s asked{}, {} requests over {} connections in {:.0} s, half to route `allow` (on_error = \"allow\"), half to `deny` (on_error = \"deny\")",
        thousands(rate),
        peak.map_or(String::new(), |p| format!(" (half of the {} req/s wrk peak)", thousands(p))),
        thousands(requests.len() as f64),
        conns,
        seconds
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "```text");
    let _ = writeln!(
        out,
        "   s  allowed  429  fail-open    503  502/504  other  dropped  max ms  # allowed  r 429  o fail-open 200  x 503  u 502/504  ? other  ! dropped"
    );
    let peak_sec = per_sec
        .iter()
        .map(|c| c.iter().sum::<u64>())
        .max()
        .unwrap_or(1)
        .max(1);
    for (s, c) in per_sec.iter().enumerate() {
        let dropped = c[6] + c[7] + c[8];
        let groups = [
            (c[0], '#'),
            (c[2], 'r'),
            (c[1], 'o'),
            (c[3], 'x'),
            (c[4], 'u'),
            (c[5], '?'),
            (dropped, '!'),
        ];
        let bar = bar(&groups, peak_sec, 40);
        let marks: Vec<String> = events
            .iter()
            .filter(|e| e.at_ms >= s as f64 * 1000.0 && e.at_ms < (s + 1) as f64 * 1000.0)
            .map(|e| format!("{:.2} s {}", e.at_ms / 1000.0, e.text))
            .collect();
        let _ = writeln!(
            out,
            "{:>4} {:>8} {:>4} {:>10} {:>6} {:>8} {:>6} {:>8} {:>7.0}  {:<40}{}",
            s,
            c[0],
            c[2],
            c[1],
            c[3],
            c[4],
            c[5],
            dropped,
            max_lat[s],
            bar,
            if marks.is_empty() {
                String::new()
            } else {
                format!("  <- {}", marks.join("; "))
            }
        );
    }
    let _ = writeln!(out, "```");
    let _ = writeln!(
        out,
        "(`allowed`: 200 carrying the store's rate-limit headers; `fail-open`: 200 without them (store_error_allowed); rows by the second the request was sent; `max ms`: its slowest answer)"
    );
    let _ = writeln!(out);

    // ---- figures
    let count = |f: &dyn Fn(&Request) -> bool| requests.iter().filter(|r| f(r)).count();
    let open_allow = count(&|r| r.route == 0 && r.outcome == Outcome::Open);
    let denied_deny = count(&|r| r.route == 1 && r.outcome == Outcome::Denied);
    let upstream = count(&|r| r.outcome == Outcome::Upstream);
    let dropped = count(&|r| r.outcome.dropped());
    let unexplained_n = count(&|r| unexplained(r));
    let before_fault_bad = count(&|r| fault_at.is_some_and(|f| r.start_ms < f) && !correct(r));
    let slowest = requests.iter().map(|r| r.latency_ms).fold(0.0, f64::max);
    let over_1s = count(&|r| r.latency_ms > 1000.0);
    let mut breakdown: HashMap<(usize, Outcome), u64> = HashMap::new();
    for r in requests.iter().filter(|r| unexplained(r)) {
        *breakdown.entry((r.route, r.outcome)).or_default() += 1;
    }
    let mut breakdown: Vec<String> = breakdown
        .into_iter()
        .map(|((route, o), n)| format!("{n} {} on `{}`", o.name(), ROUTES[route]))
        .collect();
    breakdown.sort();

    // Recovered: the start of the first whole second, from the moment the store answered
    // again, in which every request sent was decided correctly (so a lone store timeout under
    // load much later does not move it; those are counted apart).
    let bad_after_back: Vec<f64> = back_at.map_or(Vec::new(), |b| {
        requests
            .iter()
            .filter(|r| r.start_ms >= b && !correct(r))
            .map(|r| r.start_ms)
            .collect()
    });
    let run_end = seconds * 1000.0;
    let recovered_at = back_at.and_then(|b| {
        if bad_after_back.first().is_none_or(|&x| x >= b + 1000.0) {
            return Some(b);
        }
        let mut at = bad_after_back[bad_after_back.len() - 1];
        for w in bad_after_back.windows(2) {
            if w[1] >= w[0] + 1000.0 {
                at = w[0];
                break;
            }
        }
        // The clean second must lie within the run.
        (at + 1000.0 <= run_end).then_some(at)
    });
    let later_bad = recovered_at.map_or(0, |t| bad_after_back.iter().filter(|&&x| x > t).count());
    let first_good_after_back = back_at.and_then(|b| {
        requests
            .iter()
            .filter(|r| r.start_ms >= b && correct(r))
            .map(|r| r.start_ms - b)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))))
    });
    let outage = match (fault_at, back_at) {
        (Some(f), Some(b)) => format!("{:.2} s", (b - f) / 1000.0),
        _ => "-".into(),
    };
    let any_bad_after_fault = requests
        .iter()
        .any(|r| fault_at.is_some_and(|f| r.start_ms >= f) && !correct(r));
    let settle = match (back_at, recovered_at) {
        (Some(b), Some(t)) => format!("{:.2} s", (t - b) / 1000.0),
        _ if !any_bad_after_fault => "0 (no request failed)".to_string(),
        (Some(b), None) => format!(
            "never (not within the {:.1} s left of the run)",
            (run_end - b) / 1000.0
        ),
        _ => "-".into(),
    };
    let first_good = first_good_after_back.map_or("-".into(), |ms| format!("{:.3} s", ms / 1000.0));

    // ---- counts in Redis against what the store allowed
    let mut lost_text = "-".to_string();
    let mut lost_detail = String::new();
    if let Some(zpath) = opts.get("zcard") {
        let mut zcard: HashMap<String, u64> = HashMap::new();
        for line in read_lines(zpath) {
            let mut f = line.split_whitespace();
            if let (Some(k), Some(v)) = (f.next(), f.next().and_then(|v| v.parse::<u64>().ok())) {
                *zcard.entry(k.to_string()).or_default() += v;
            }
        }
        let (mut decided, mut lost, mut over, mut below, mut keys_lost) =
            (0u64, 0u64, 0u64, 0u64, 0u64);
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
            decided += d;
            if d > z {
                lost += d - z;
                keys_lost += 1;
            } else {
                over += z - d;
            }
            if z < m {
                below += 1;
            }
        }
        lost_text = format!("{lost} of {}", thousands(decided as f64));
        lost_detail = format!(
            "Redis holds, per key, the entries of the requests the store allowed: {lost} allowed request(s) missing from Redis over {keys_lost} key(s); {over} entrie(s) more than the 200s the store decided (requests charged in Redis whose client got another answer: on_error because the store answered after store.timeout, or a 502/504 from the upstream); {below} key(s) whose count in Redis is below a count Redis once reported"
        );
    }
    let mut metrics_line = String::new();
    if let Some(mpath) = opts.get("metrics") {
        let mut by: HashMap<String, f64> = HashMap::new();
        for line in read_lines(mpath) {
            let decision = label(&line, "decision");
            let (Some(rest), true) = (
                line.strip_prefix("slidegate_requests_total{")
                    .or_else(|| line.strip_prefix("slidegate_store_errors_total{")),
                !line.starts_with('#'),
            ) else {
                continue;
            };
            let value: f64 = rest
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            let name = if line.starts_with("slidegate_requests_total") {
                format!(
                    "{}:{}",
                    label(&line, "route").unwrap_or("?"),
                    decision.unwrap_or("?")
                )
            } else {
                format!("store_errors:{}", label(&line, "kind").unwrap_or("?"))
            };
            *by.entry(name).or_default() += value;
        }
        let mut names: Vec<_> = by.into_iter().filter(|(_, v)| *v > 0.0).collect();
        names.sort_by(|a, b| a.0.cmp(&b.0));
        metrics_line = names
            .iter()
            .map(|(k, v)| format!("{k}={v:.0}"))
            .collect::<Vec<_>>()
            .join(" ");
    }

    let note = opts.get("note").unwrap_or("");
    let _ = writeln!(
        out,
        "- store (or upstream) back after: {outage} (fault to the moment it answered again)"
    );
    let _ = writeln!(out, "- first request decided correctly after that: {first_good}; recovered after it (the first whole second in which every request was decided correctly starts): {settle} (goal: within 2 s)");
    let _ = writeln!(out, "- answered by on_error: {open_allow} fail-open 200 on `allow`, {denied_deny} 503 on `deny`; 502/504: {upstream}");
    let _ = writeln!(
        out,
        "- unexplained by on_error (goal 0): {unexplained_n}{}",
        if breakdown.is_empty() {
            String::new()
        } else {
            format!(" ({})", breakdown.join(", "))
        }
    );
    let _ = writeln!(
        out,
        "- dropped connections (connect errors, resets, client timeouts of 5 s; goal 0): {dropped}"
    );
    let _ = writeln!(
        out,
        "- slowest answer: {slowest:.0} ms; answers slower than 1 s: {over_1s}"
    );
    if later_bad > 0 {
        let _ = writeln!(out, "- after that, {later_bad} request(s) were answered by on_error again (store.timeout under load)");
    }
    let skipped: u64 = std::fs::read_to_string(format!("{dir}/skipped"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    if skipped > 0 {
        let _ = writeln!(out, "- {skipped} request(s) of the schedule not sent: their connection was more than 100 ms behind (a slow answer, or the machine busy)");
    }
    if before_fault_bad > 0 {
        let _ = writeln!(out, "- before the fault, {before_fault_bad} request(s) were not decided by the store (store.timeout under load)");
    }
    if !lost_detail.is_empty() {
        let _ = writeln!(out, "- {lost_detail}");
    }
    if !metrics_line.is_empty() {
        let _ = writeln!(out, "- gateway /metrics after the run: {metrics_line}");
    }
    if !note.is_empty() {
        let _ = writeln!(out, "- {note}");
    }
    let _ = writeln!(out);
    print!("{out}");
    if let Some(chart_out) = opts.get("chart-out") {
        append(chart_out, &out);
    }
    let row = format!(
        "| {fault} | {} | {} | {outage} | {first_good} | {settle} | {open_allow} | {denied_deny} | {upstream} | {unexplained_n} | {dropped} | {slowest:.0} | {lost_text} | {} |\n",
        thousands(rate),
        thousands(requests.len() as f64),
        if note.is_empty() { "-" } else { note }
    );
    append(opts.req("row-out"), &row);
}

fn append(path: &str, text: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| die(&format!("{path}: {e}")));
    f.write_all(text.as_bytes()).expect("written");
}

/// A label's value in a Prometheus text line.
fn label<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let at = line.find(&format!("{name}=\""))? + name.len() + 2;
    let rest = &line[at..];
    Some(&rest[..rest.find('"')?])
}

/// A bar of `width` characters at most for `total`, each group's share in its character
/// (every non-empty group gets at least one).
fn bar(groups: &[(u64, char)], total: u64, width: usize) -> String {
    let mut out = String::new();
    for &(n, ch) in groups {
        if n == 0 {
            continue;
        }
        let len = ((n as f64 / total as f64) * width as f64).round().max(1.0) as usize;
        out.extend(std::iter::repeat_n(ch, len));
    }
    out.chars().take(width).collect()
}

fn thousands(v: f64) -> String {
    let s = format!("{:.0}", v);
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

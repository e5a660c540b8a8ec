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

mod load;
mod report;
mod slots;

use std::collections::HashMap;

/// The routes of the load, by their number in the records: `allow` (`on_error = "allow"`) and
/// `deny` (`on_error = "deny"`).
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

/// Every outcome, in the order of their numbers.
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
    /// Its name in `requests.tsv`.
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

    /// The outcome of that name, if any.
    fn from_name(name: &str) -> Option<Outcome> {
        OUTCOMES.iter().copied().find(|o| o.name() == name)
    }

    /// Whether the request got no answer at all (connect error, reset, client timeout).
    fn dropped(self) -> bool {
        matches!(self, Outcome::Connect | Outcome::Reset | Outcome::Timeout)
    }
}

/// Runs the command named by the first argument.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        die("usage: faults-load run|slot-users|report ... (see the top of src/main.rs)");
    };
    let opts = Opts::parse(rest);
    match command.as_str() {
        "run" => load::run(&opts),
        "slot-users" => slots::slot_users(&opts),
        "report" => report::report(&opts),
        other => die(&format!("unknown command {other}")),
    }
}

/// Prints the message and exits with status 2.
fn die(message: &str) -> ! {
    eprintln!("faults-load: {message}");
    std::process::exit(2);
}

/// `--name value` pairs and `--flag`s.
struct Opts {
    /// The value of each option given (empty for a flag).
    values: HashMap<String, String>,
}

impl Opts {
    /// Reads the arguments after the command; dies on one that is not an option.
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

    /// The value of `--name`, if given.
    fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// The value of `--name`; dies without it.
    fn req(&self, name: &str) -> &str {
        self.get(name)
            .unwrap_or_else(|| die(&format!("--{name} is required")))
    }

    /// The number `--name`, else `default`; dies when it is no number, or missing without a
    /// default.
    fn num<T: std::str::FromStr>(&self, name: &str, default: Option<T>) -> T {
        match self.get(name) {
            Some(v) => v
                .parse()
                .unwrap_or_else(|_| die(&format!("--{name}: not a number: {v}"))),
            None => default.unwrap_or_else(|| die(&format!("--{name} is required"))),
        }
    }

    /// Whether `--name` was given.
    fn flag(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }
}

//! What the report reads: the run's records (`meta`, `requests.tsv`, `skipped` in `--dir`) and
//! the events file (`--events`: lines `EPOCH_MS KIND TEXT`, e.g. `fault` and `back`).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};

use crate::{die, Opts, Outcome, ROUTES};

/// One request of `requests.tsv`.
pub struct Request {
    /// When it was sent, in ms from the start.
    pub start_ms: f64,
    /// Its route's number in `ROUTES`.
    pub route: usize,
    /// What it got.
    pub outcome: Outcome,
    /// How long its answer took, in ms.
    pub latency_ms: f64,
    /// Its Redis key, as `keys.tsv` names it (empty in runs recorded without it).
    pub key: String,
}

/// One line of the events file.
pub struct Event {
    /// When it happened, in ms from the start.
    pub at_ms: f64,
    /// Its kind: `fault` and `back` mark the outage.
    pub kind: String,
    /// What happened, as the chart shows it.
    pub text: String,
}

/// One fault's run, as recorded.
pub struct Run {
    /// How long the load lasted, in s.
    pub seconds: f64,
    /// Requests per second asked.
    pub rate: f64,
    /// Connections.
    pub conns: f64,
    /// The requests, in the order they were sent.
    pub requests: Vec<Request>,
    /// The events, in their order in the file.
    pub events: Vec<Event>,
    /// When the fault began (the first `fault` event), in ms from the start.
    pub fault_at: Option<f64>,
    /// When the store (or upstream) answered again (the first `back` event).
    pub back_at: Option<f64>,
    /// Whether the fault is the upstream's (`--upstream-fault`).
    pub upstream_fault: bool,
}

impl Run {
    /// Reads the run in `dir` and the events file; dies when one is missing.
    pub fn read(dir: &str, opts: &Opts) -> Run {
        let upstream_fault = opts.flag("upstream-fault");
        let meta = read_meta(dir);
        let start_epoch = meta_num(&meta, "start_epoch_ms");
        let seconds = meta_num(&meta, "seconds");
        let rate = meta_num(&meta, "rate");
        let conns = meta_num(&meta, "conns");
        let requests = read_requests(dir);
        let events = read_events(opts.req("events"), start_epoch);
        let first = |kind: &str| events.iter().find(|e| e.kind == kind).map(|e| e.at_ms);
        let fault_at = first("fault");
        let back_at = first("back");
        Run {
            seconds,
            rate,
            conns,
            requests,
            events,
            fault_at,
            back_at,
            upstream_fault,
        }
    }
}

/// The lines of the file `path`; dies when it cannot be opened.
pub fn read_lines(path: &str) -> Vec<String> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| die(&format!("{path}: {e}")));
    BufReader::new(file).lines().map_while(Result::ok).collect()
}

/// The requests of the schedule not sent (`skipped`; 0 without it).
pub fn skipped(dir: &str) -> u64 {
    std::fs::read_to_string(format!("{dir}/skipped"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// The `name=value` lines of `meta`.
fn read_meta(dir: &str) -> HashMap<String, String> {
    let mut meta = HashMap::new();
    for line in read_lines(&format!("{dir}/meta")) {
        if let Some((k, v)) = line.split_once('=') {
            meta.insert(k.to_string(), v.to_string());
        }
    }
    meta
}

/// The number `key` of `meta`; dies without it.
fn meta_num(meta: &HashMap<String, String>, key: &str) -> f64 {
    meta.get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| die(&format!("meta: no {key}")))
}

/// The requests of `requests.tsv` (lines it cannot read are left out).
fn read_requests(dir: &str) -> Vec<Request> {
    read_lines(&format!("{dir}/requests.tsv"))
        .iter()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let route_name = *f.get(1)?;
            Some(Request {
                start_ms: f.first()?.parse().ok()?,
                route: ROUTES.iter().position(|r| *r == route_name)?,
                outcome: Outcome::from_name(f.get(2)?)?,
                latency_ms: f.get(4)?.parse().ok()?,
                key: f.get(5).map_or(String::new(), |k| k.to_string()),
            })
        })
        .collect()
}

/// The events of the file `path`, timed from the run's start (`start_epoch`, ms since 1970).
fn read_events(path: &str, start_epoch: f64) -> Vec<Event> {
    read_lines(path)
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
        .collect()
}

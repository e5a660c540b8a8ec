//! `slidegate campaign`: sends a campaign's user ids through the batch decision API of a running
//! gateway in chunks, with several calls in flight, and answers the operator's question: who
//! may be messaged. It writes the ids it allowed (`--allowed FILE`, one per line, in input
//! order) and the refused ones with their reason (`--refused FILE`), prints how many were
//! allowed and refused (by decision and by segment or plan) and the rate, and shows its progress.
//! `--dry-run` decides every id as the campaign would but charges nothing (a preview). The ids
//! come from a text file (one u32 per line, `-` for standard input) or a portable roaring
//! bitmap (`.roaring`); a line that is not a user id stops the campaign before anything is sent.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use http::{header, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;

/// What to send where.
pub struct Campaign {
    /// The admin listener, like `http://127.0.0.1:9091`.
    pub admin: Uri,
    /// The bearer token.
    pub token: String,
    /// The route whose limits apply.
    pub route: String,
    /// Keys per call (at most 10,000).
    pub chunk: usize,
    /// Calls in flight at once.
    pub in_flight: usize,
    /// Decide without charging.
    pub dry_run: bool,
}

/// Why a campaign stopped.
#[derive(Debug, thiserror::Error)]
pub enum CampaignError {
    /// The ids could not be read.
    #[error("{0}")]
    Ids(String),
    /// A call failed or was refused.
    #[error("{0}")]
    Call(String),
    /// An output file could not be written.
    #[error("{0}")]
    Output(String),
}

/// The tally of a campaign.
#[derive(Debug, Default)]
pub struct Tally {
    /// Keys decided.
    pub decided: u64,
    /// Keys allowed.
    pub allowed: u64,
    /// Count per decision label (`allowed`, `rejected`, `blocked`, `store_error_allowed`...).
    pub by_decision: BTreeMap<String, u64>,
    /// Allowed and refused per segment or plan.
    pub by_tier: BTreeMap<String, (u64, u64)>,
    /// Wall time of the whole run.
    pub elapsed: Duration,
    /// Whether nothing was charged.
    pub dry_run: bool,
}

impl Tally {
    /// Decisions per second.
    pub fn rate(&self) -> f64 {
        self.decided as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The printed report.
    pub fn report(&self) -> String {
        let preview = if self.dry_run {
            " (dry run: nothing was charged)"
        } else {
            ""
        };
        let mut out = format!(
            "decided {} keys in {:.2} s ({:.0} decisions/s): {} allowed, {} refused{preview}\n",
            self.decided,
            self.elapsed.as_secs_f64(),
            self.rate(),
            self.allowed,
            self.decided - self.allowed
        );
        for (label, n) in &self.by_decision {
            out.push_str(&format!("  decision {label:<20} {n}\n"));
        }
        for (tier, (allowed, refused)) in &self.by_tier {
            out.push_str(&format!(
                "  {tier:<29} {allowed} allowed, {refused} refused\n"
            ));
        }
        out
    }

    fn count(&mut self, r: &KeyResult) {
        self.decided += 1;
        self.allowed += u64::from(r.allowed);
        *self.by_decision.entry(r.decision.clone()).or_default() += 1;
        let tier = match (&r.segment, &r.plan) {
            (Some(s), _) => format!("segment {s}"),
            (_, Some(p)) => format!("plan {p}"),
            _ => "no segment or plan".to_string(),
        };
        let entry = self.by_tier.entry(tier).or_default();
        if r.allowed {
            entry.0 += 1;
        } else {
            entry.1 += 1;
        }
    }
}

#[derive(Deserialize)]
struct Results {
    results: Vec<KeyResult>,
}

#[derive(Deserialize)]
struct KeyResult {
    allowed: bool,
    decision: String,
    /// `null` for a key no wait lets in (written `-`).
    #[serde(default)]
    retry_after_ms: Option<u64>,
    segment: Option<String>,
    plan: Option<String>,
}

/// Where the allowed and refused ids go (either may be off).
#[derive(Default)]
pub struct Outputs {
    /// `--allowed FILE`: one id per line.
    pub allowed: Option<Box<dyn Write + Send>>,
    /// `--refused FILE`: `id<TAB>decision<TAB>retry_after_ms` per line.
    pub refused: Option<Box<dyn Write + Send>>,
}

/// Reads the ids of a campaign: a `.roaring` bitmap, or text with one u32 per line (blank
/// lines skipped); a line that is not one names its number.
pub fn read_ids(path: &Path) -> Result<Vec<u32>, CampaignError> {
    if path.extension().is_some_and(|e| e == "roaring") {
        let members = crate::tier::read_segment(path).map_err(CampaignError::Ids)?;
        return Ok(members.iter().collect());
    }
    let reader: Box<dyn BufRead> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(path)
            .map_err(|e| CampaignError::Ids(format!("cannot read `{}`: {e}", path.display())))?;
        Box::new(std::io::BufReader::new(file))
    };
    crate::tier::parse_ids(reader, &path.display().to_string()).map_err(CampaignError::Ids)
}

impl Campaign {
    /// Sends every id, `chunk` per call, `in_flight` calls at once, writing the outputs in
    /// input order; stops at the first failed call.
    pub async fn run(&self, ids: &[u32], mut outputs: Outputs) -> Result<Tally, CampaignError> {
        let client: Client<HttpConnector, Full<Bytes>> =
            Client::builder(TokioExecutor::new()).build_http();
        let url: Uri = format!("{}v1/decisions", with_slash(&self.admin))
            .parse()
            .map_err(|e| CampaignError::Call(format!("admin URL: {e}")))?;
        let started = Instant::now();
        let mut tally = Tally {
            dry_run: self.dry_run,
            ..Tally::default()
        };
        let mut progress = Progress::new(ids.len() as u64);
        let chunk = self.chunk.clamp(1, crate::admin::MAX_BATCH_KEYS);
        let mut chunks = ids.chunks(chunk).enumerate();
        let mut calls = FuturesUnordered::new();
        // Answers that came back before an earlier chunk's, kept until it is written.
        let mut waiting: HashMap<usize, (&[u32], Results)> = HashMap::new();
        let mut next_to_write = 0;
        loop {
            while calls.len() < self.in_flight.max(1) {
                let Some((i, ids)) = chunks.next() else { break };
                let call = self.call(&client, url.clone(), ids);
                calls.push(async move { (i, ids, call.await) });
            }
            let Some((i, ids, result)) = calls.next().await else {
                break;
            };
            waiting.insert(i, (ids, result?));
            while let Some((ids, results)) = waiting.remove(&next_to_write) {
                for (id, r) in ids.iter().zip(&results.results) {
                    tally.count(r);
                    write_result(&mut outputs, *id, r)?;
                }
                next_to_write += 1;
                progress.show(tally.decided, started.elapsed());
            }
        }
        for out in [&mut outputs.allowed, &mut outputs.refused]
            .into_iter()
            .flatten()
        {
            out.flush()
                .map_err(|e| CampaignError::Output(e.to_string()))?;
        }
        progress.done();
        tally.elapsed = started.elapsed();
        Ok(tally)
    }

    async fn call(
        &self,
        client: &Client<HttpConnector, Full<Bytes>>,
        url: Uri,
        ids: &[u32],
    ) -> Result<Results, CampaignError> {
        let keys: Vec<String> = ids.iter().map(u32::to_string).collect();
        let body = serde_json::json!({
            "route": self.route, "keys": keys, "cost": 1, "dry_run": self.dry_run,
        })
        .to_string();
        let req = Request::builder()
            .method(Method::POST)
            .uri(url)
            .header(header::AUTHORIZATION, format!("Bearer {}", self.token))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| CampaignError::Call(e.to_string()))?;
        let response = client
            .request(req)
            .await
            .map_err(|e| CampaignError::Call(format!("POST /v1/decisions: {e}")))?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| CampaignError::Call(e.to_string()))?
            .to_bytes();
        if status != StatusCode::OK {
            return Err(CampaignError::Call(format!(
                "POST /v1/decisions answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            )));
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| CampaignError::Call(format!("unexpected answer: {e}")))
    }
}

fn write_result(outputs: &mut Outputs, id: u32, r: &KeyResult) -> Result<(), CampaignError> {
    let written = match (r.allowed, &mut outputs.allowed, &mut outputs.refused) {
        (true, Some(out), _) => writeln!(out, "{id}"),
        (false, _, Some(out)) => match r.retry_after_ms {
            Some(ms) => writeln!(out, "{id}\t{}\t{ms}", r.decision),
            None => writeln!(out, "{id}\t{}\t-", r.decision),
        },
        _ => Ok(()),
    };
    written.map_err(|e| CampaignError::Output(e.to_string()))
}

/// Progress on standard error: `indicatif`'s bar on a terminal, a plain line every few seconds
/// otherwise (a log file or a pipe, where a redrawn bar would be noise).
enum Progress {
    Bar(indicatif::ProgressBar),
    Lines { total: u64, last: Instant },
}

impl Progress {
    const EVERY: Duration = Duration::from_secs(5);

    fn new(total: u64) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress::Lines {
                total,
                last: Instant::now(),
            };
        }
        let bar = indicatif::ProgressBar::new(total);
        let style = indicatif::ProgressStyle::with_template(
            "[{bar:30}] {percent:>3}% {human_pos}/{human_len} ids {per_sec} eta {eta}",
        )
        .expect("a valid template")
        .progress_chars("#>.");
        bar.set_style(style);
        Progress::Bar(bar)
    }

    fn show(&mut self, done: u64, elapsed: Duration) {
        match self {
            Progress::Bar(bar) => bar.set_position(done),
            Progress::Lines { total, last } => {
                if last.elapsed() < Self::EVERY && done < *total {
                    return;
                }
                *last = Instant::now();
                let share = done as f64 / (*total).max(1) as f64;
                let rate = done as f64 / elapsed.as_secs_f64().max(1e-9);
                eprintln!(
                    "campaign: {done} of {total} ids decided ({:.0}%), {rate:.0}/s",
                    share * 100.0
                );
            }
        }
    }

    fn done(&self) {
        if let Progress::Bar(bar) = self {
            bar.finish();
        }
    }
}

fn with_slash(uri: &Uri) -> String {
    let text = uri.to_string();
    if text.ends_with('/') {
        text
    } else {
        format!("{text}/")
    }
}

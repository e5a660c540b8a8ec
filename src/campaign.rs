//! `slidegate campaign`: sends a campaign's user ids through the batch decision API of a running
//! gateway in chunks, with several calls in flight, and prints how many were allowed and denied
//! (by decision and by segment or plan) and the rate. The ids come from a text file (one per
//! line, `-` for standard input) or a portable roaring bitmap (`.roaring`).

use std::collections::BTreeMap;
use std::io::BufRead;
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
    /// Allowed and denied per segment or plan (`-` for the route's own values).
    pub by_tier: BTreeMap<String, (u64, u64)>,
    /// Wall time of the whole run.
    pub elapsed: Duration,
}

impl Tally {
    /// Decisions per second.
    pub fn rate(&self) -> f64 {
        self.decided as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The printed report.
    pub fn report(&self) -> String {
        let mut out = format!(
            "decided {} keys in {:.2} s ({:.0} decisions/s): {} allowed, {} denied\n",
            self.decided,
            self.elapsed.as_secs_f64(),
            self.rate(),
            self.allowed,
            self.decided - self.allowed
        );
        for (label, n) in &self.by_decision {
            out.push_str(&format!("  decision {label:<20} {n}\n"));
        }
        for (tier, (allowed, denied)) in &self.by_tier {
            out.push_str(&format!(
                "  {tier:<29} {allowed} allowed, {denied} denied\n"
            ));
        }
        out
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
    segment: Option<String>,
    plan: Option<String>,
}

/// Reads the ids of a campaign.
pub fn read_ids(path: &Path) -> Result<Vec<String>, CampaignError> {
    if path.extension().is_some_and(|e| e == "roaring") {
        let members = crate::tier::read_segment(path).map_err(CampaignError::Ids)?;
        return Ok(members.iter().map(|id| id.to_string()).collect());
    }
    let reader: Box<dyn BufRead> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(path)
            .map_err(|e| CampaignError::Ids(format!("cannot read `{}`: {e}", path.display())))?;
        Box::new(std::io::BufReader::new(file))
    };
    let mut ids = Vec::new();
    for line in reader.lines() {
        let line = line.map_err(|e| CampaignError::Ids(e.to_string()))?;
        let id = line.trim();
        if !id.is_empty() {
            ids.push(id.to_string());
        }
    }
    Ok(ids)
}

impl Campaign {
    /// Sends every id, `chunk` per call, `in_flight` calls at once; stops at the first failed call.
    pub async fn run(&self, ids: &[String]) -> Result<Tally, CampaignError> {
        let client: Client<HttpConnector, Full<Bytes>> =
            Client::builder(TokioExecutor::new()).build_http();
        let url: Uri = format!("{}v1/decisions", with_slash(&self.admin))
            .parse()
            .map_err(|e| CampaignError::Call(format!("admin URL: {e}")))?;
        let started = Instant::now();
        let mut tally = Tally::default();
        let mut chunks = ids.chunks(self.chunk.clamp(1, 10_000));
        let mut calls = FuturesUnordered::new();
        loop {
            while calls.len() < self.in_flight.max(1) {
                let Some(chunk) = chunks.next() else { break };
                calls.push(self.call(&client, url.clone(), chunk));
            }
            let Some(result) = calls.next().await else {
                break;
            };
            for r in result?.results {
                tally.decided += 1;
                tally.allowed += u64::from(r.allowed);
                *tally.by_decision.entry(r.decision).or_default() += 1;
                let tier = match (r.segment, r.plan) {
                    (Some(s), _) => format!("segment {s}"),
                    (_, Some(p)) => format!("plan {p}"),
                    _ => "no segment or plan".to_string(),
                };
                let entry = tally.by_tier.entry(tier).or_default();
                if r.allowed {
                    entry.0 += 1;
                } else {
                    entry.1 += 1;
                }
            }
        }
        tally.elapsed = started.elapsed();
        Ok(tally)
    }

    async fn call(
        &self,
        client: &Client<HttpConnector, Full<Bytes>>,
        url: Uri,
        keys: &[String],
    ) -> Result<Results, CampaignError> {
        let body = serde_json::json!({ "route": self.route, "keys": keys, "cost": 1 }).to_string();
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

fn with_slash(uri: &Uri) -> String {
    let text = uri.to_string();
    if text.ends_with('/') {
        text
    } else {
        format!("{text}/")
    }
}

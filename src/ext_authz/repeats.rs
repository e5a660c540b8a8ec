//! One request, one charge: a `Check` repeated for the same request (the same
//! `attributes.request.http.id`, with the same method, path, host and source) is answered from
//! the first one's decision, never decided and charged again. Envoy can send a request's
//! `Check` twice when the gRPC call is retried (`retry_policy` on the ext_authz `grpc_service`:
//! the first call may have been decided and its answer lost) or when an older Envoy called
//! `Check` once per body buffer past `max_request_bytes` (envoyproxy/envoy#13260).
//!
//! The first decisions are kept in process, [`KEPT_FOR`] each and at most [`MAX_KEPT`] at once
//! (a full map keeps nothing new until entries lapse: a repeat is then decided again, as
//! without the map). A repeat that reaches another instance is decided there again: put the
//! instances behind a hash of the request id, or keep retries off, where that matters.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::auth::v3::{CheckRequest, CheckResponse};
use tokio::sync::OnceCell;

/// How long a first decision answers repeats.
pub const KEPT_FOR: Duration = Duration::from_secs(10);
/// Most first decisions kept at once.
pub const MAX_KEPT: usize = 65_536;

/// What tells one request from another: Envoy's stream id and what the request is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestIdentity {
    id: String,
    method: String,
    path: String,
    host: String,
    /// The source address as Envoy encoded it (protobuf bytes: cheaper than any text of it).
    source: Vec<u8>,
}

impl RequestIdentity {
    /// The identity of the request `check` asks about; `None` without an id.
    pub fn of(check: &CheckRequest) -> Option<RequestIdentity> {
        let attributes = check.attributes.as_ref()?;
        let http = attributes.request.as_ref()?.http.as_ref()?;
        if http.id.is_empty() {
            return None;
        }
        let source = attributes
            .source
            .as_ref()
            .and_then(|p| p.address.as_ref())
            .map(prost::Message::encode_to_vec)
            .unwrap_or_default();
        Some(RequestIdentity {
            id: http.id.clone(),
            method: http.method.clone(),
            path: http.path.clone(),
            host: http.host.clone(),
            source,
        })
    }
}

struct Kept {
    since: Instant,
    answer: Arc<OnceCell<CheckResponse>>,
}

/// The first decisions of the requests seen lately.
#[derive(Default)]
pub struct FirstDecisions {
    kept: Mutex<Map>,
}

#[derive(Default)]
struct Map {
    entries: HashMap<RequestIdentity, Kept>,
    /// When lapsed entries were last swept out of a full map (a sweep reads every entry, so a
    /// map full of live ones is swept at most once a second).
    swept: Option<Instant>,
}

impl FirstDecisions {
    /// The answer to the request `identity`: the first decision's, waiting for it while it is
    /// being made, or `decide`'s when this is the first (or the first was given up).
    pub async fn answer<F>(&self, identity: RequestIdentity, decide: F) -> CheckResponse
    where
        F: Future<Output = CheckResponse>,
    {
        let cell = self.cell(identity);
        match cell {
            Some(cell) => cell.get_or_init(|| decide).await.clone(),
            None => decide.await,
        }
    }

    /// The cell of `identity`'s first decision: the one kept, or a new one when there is
    /// room; `None` when the map is full of live entries.
    fn cell(&self, identity: RequestIdentity) -> Option<Arc<OnceCell<CheckResponse>>> {
        let now = Instant::now();
        let mut map = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = map.entries.get(&identity) {
            if now.duration_since(k.since) < KEPT_FOR {
                return Some(k.answer.clone());
            }
        }
        if map.entries.len() >= MAX_KEPT {
            let due = map
                .swept
                .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1));
            if due {
                map.entries
                    .retain(|_, k| now.duration_since(k.since) < KEPT_FOR);
                map.swept = Some(now);
            }
            if map.entries.len() >= MAX_KEPT {
                return None;
            }
        }
        let answer = Arc::new(OnceCell::new());
        map.entries.insert(
            identity,
            Kept {
                since: now,
                answer: answer.clone(),
            },
        );
        Some(answer)
    }

    /// How many first decisions are kept now (lapsed ones included until swept).
    pub fn len(&self) -> usize {
        self.kept.lock().map(|k| k.entries.len()).unwrap_or(0)
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

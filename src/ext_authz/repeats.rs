//! One request, one charge: a `Check` repeated for the same request (the same
//! `attributes.request.http.id`, and the same request: method, path, host, headers in any
//! order, body, source, and the instant Envoy took it, `attributes.request.time`, all in one
//! fingerprint) is answered from the first one's decision, never decided and charged again.
//! Envoy fills the id with its own stream id and the instant with the stream's start, and
//! sends a request's `Check` twice when the gRPC call is retried (`retry_policy` on the
//! ext_authz `grpc_service`: the first call may have been decided and its answer lost): the
//! same message again. The rest of the request guards against another caller of `Check` that
//! fills the id from what the client sends (its `X-Request-Id`) and the instant coarsely or not
//! at all: a client repeating one id would otherwise have each attempt (another phone number in
//! the body, another user in a header) answered from its first, uncounted. An older Envoy that
//! called `Check` once per body buffer past `max_request_bytes` (envoyproxy/envoy#13260) sent
//! a longer body each time: each is decided (over-counted, never under-counted).
//!
//! The first decisions are kept in process in two generations, at most [`MAX_KEPT`] at once:
//! new ones go to the young generation, which becomes the old one (the old one dropped) once it
//! has lived [`KEPT_FOR`] or holds half of `MAX_KEPT`. So the newest decisions are always kept,
//! each answering its repeats for [`KEPT_FOR`], or under a flood for as long as the next
//! `MAX_KEPT / 2` requests take (a retry comes within the call's timeout, well inside that). A
//! repeat that reaches another instance is decided there again: put the instances behind a hash
//! of the request id, or keep retries off, where that matters.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::auth::v3::CheckResponse;
use tokio::sync::OnceCell;

use super::wire::ReadCheck;

/// How long a first decision answers repeats.
pub const KEPT_FOR: Duration = Duration::from_secs(10);
/// Most first decisions kept at once.
pub const MAX_KEPT: usize = 65_536;

/// What tells one request from another: its id, and the fingerprint of the whole request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestIdentity {
    id: String,
    fingerprint: u64,
}

impl RequestIdentity {
    /// The identity of the request `read` asks about; `None` without an id.
    pub fn of(read: &ReadCheck) -> Option<RequestIdentity> {
        let attributes = read.check.attributes.as_ref()?;
        let http = attributes.request.as_ref()?.http.as_ref()?;
        (!http.id.is_empty()).then(|| RequestIdentity {
            id: http.id.clone(),
            fingerprint: read.fingerprint,
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
    kept: Mutex<Generations>,
}

/// The kept decisions: the young generation takes the new ones.
#[derive(Default)]
struct Generations {
    young: HashMap<RequestIdentity, Kept>,
    old: HashMap<RequestIdentity, Kept>,
    /// When the young generation began.
    began: Option<Instant>,
}

type Entries = HashMap<RequestIdentity, Kept>;

impl FirstDecisions {
    /// The answer to the request `identity`: the first decision's, waiting for it while it is
    /// being made, or `decide`'s when this is the first (or the first was given up).
    pub async fn answer<F>(&self, identity: RequestIdentity, decide: F) -> CheckResponse
    where
        F: Future<Output = CheckResponse>,
    {
        let cell = self.cell(identity, Instant::now());
        cell.get_or_init(|| decide).await.clone()
    }

    /// The cell of `identity`'s first decision: the one kept and live at `now`, or a new one.
    fn cell(&self, identity: RequestIdentity, now: Instant) -> Arc<OnceCell<CheckResponse>> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let live = |k: &&Kept| now.duration_since(k.since) < KEPT_FOR;
        let found = (kept.young.get(&identity).filter(live))
            .or_else(|| kept.old.get(&identity).filter(live));
        if let Some(k) = found {
            return k.answer.clone();
        }
        let dropped = kept.turn_if_due(now);
        let answer = Arc::new(OnceCell::new());
        let entry = Kept {
            since: now,
            answer: answer.clone(),
        };
        kept.young.insert(identity, entry);
        drop(kept);
        // the dropped generation is freed outside the lock
        drop(dropped);
        answer
    }

    /// How many first decisions are kept now (lapsed ones included until their generation
    /// goes).
    pub fn len(&self) -> usize {
        self.kept
            .lock()
            .map(|k| k.young.len() + k.old.len())
            .unwrap_or(0)
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Generations {
    /// Makes the young generation the old one when it has lived [`KEPT_FOR`] or holds half of
    /// [`MAX_KEPT`]; answers the generation dropped then.
    fn turn_if_due(&mut self, now: Instant) -> Option<Entries> {
        let aged = self
            .began
            .is_none_or(|began| now.duration_since(began) >= KEPT_FOR);
        if !aged && self.young.len() < MAX_KEPT / 2 {
            return None;
        }
        self.began = Some(now);
        let young = std::mem::take(&mut self.young);
        Some(std::mem::replace(&mut self.old, young))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn identity(n: usize) -> RequestIdentity {
        RequestIdentity {
            id: n.to_string(),
            fingerprint: 7,
        }
    }

    #[tokio::test]
    async fn the_newest_first_decisions_answer_their_repeats_after_a_flood() {
        let first = FirstDecisions::default();
        let decided = AtomicUsize::new(0);
        let decide = || async {
            decided.fetch_add(1, Ordering::Relaxed);
            CheckResponse::default()
        };
        let flood = MAX_KEPT + MAX_KEPT / 4;
        for n in 0..flood {
            first.answer(identity(n), decide()).await;
        }
        assert_eq!(decided.load(Ordering::Relaxed), flood);
        assert!(first.len() <= MAX_KEPT, "at most MAX_KEPT kept");
        // the newest requests' repeats are answered from their first decisions
        for n in flood - MAX_KEPT / 2..flood {
            first.answer(identity(n), decide()).await;
        }
        assert_eq!(decided.load(Ordering::Relaxed), flood);
        // the oldest are gone (decided again)
        first.answer(identity(0), decide()).await;
        assert_eq!(decided.load(Ordering::Relaxed), flood + 1);
    }

    #[test]
    fn a_first_decision_lapses_after_kept_for() {
        let first = FirstDecisions::default();
        let t0 = Instant::now();
        let cell = first.cell(identity(1), t0);
        let again = first.cell(identity(1), t0 + KEPT_FOR / 2);
        assert!(
            Arc::ptr_eq(&cell, &again),
            "a repeat within KEPT_FOR shares the cell"
        );
        let later = first.cell(identity(1), t0 + KEPT_FOR);
        assert!(
            !Arc::ptr_eq(&cell, &later),
            "a lapsed decision answers nothing"
        );
    }
}

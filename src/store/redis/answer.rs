//! A decision's answer: the future a caller waits on ([`RedisAnswer`]), the decoding of its
//! part of a call's reply into a [`Decision`] (with the receipt of its charge when asked), and
//! the sorting of the client library's errors into the store's error kinds.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use fred::error::{Error as FredError, ErrorKind};
use tokio::sync::oneshot;

use super::lane;
use crate::store::{Decision, LimitSet, Receipt, ReceiptPart, StoreError};

/// A decision queued on a lane, decoded when its call's reply arrives.
pub enum RedisAnswer {
    /// One call decides it.
    Single(Single),
    /// A cluster request decided one part per slot.
    Split(Pin<Box<dyn Future<Output = Result<Decision, StoreError>> + Send>>),
}

/// One decision waiting for its call.
pub struct Single {
    pub(super) limits: Arc<LimitSet>,
    pub(super) receiver: oneshot::Receiver<Result<lane::Answer, StoreError>>,
    pub(super) cost: u64,
}

impl Future for RedisAnswer {
    type Output = Result<Decision, StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            RedisAnswer::Single(s) => {
                let reply = std::task::ready!(Pin::new(&mut s.receiver).poll(cx));
                Poll::Ready(decode(&s.limits, reply, s.cost))
            }
            RedisAnswer::Split(future) => future.as_mut().poll(cx),
        }
    }
}

/// A decision from its part of a call's reply (or the call's error, or a lane that stopped).
fn decode(
    limits: &LimitSet,
    reply: Result<Result<lane::Answer, StoreError>, oneshot::error::RecvError>,
    cost: u64,
) -> Result<Decision, StoreError> {
    match reply {
        Ok(Ok(a)) => {
            let mut decision = Decision::from_reply(limits, &a.values, a.decided_at_us)?;
            if let (Some(member), true) = (a.member, decision.allowed()) {
                decision.receipt = Some(Receipt {
                    parts: vec![ReceiptPart {
                        slot: None,
                        member,
                        decided_at_us: a.decided_at_us,
                    }],
                    cost,
                });
            }
            Ok(decision)
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(StoreError::Other("the decision lane stopped".into())),
    }
}

/// Whether Redis answered that it does not know the script.
pub(super) fn is_noscript(e: &FredError) -> bool {
    e.details().starts_with("NOSCRIPT")
}

/// Whether Redis answered that it does not know the library's function (a node that restarted,
/// was promoted, or whose functions were flushed).
pub(super) fn is_function_missing(e: &FredError) -> bool {
    e.details().starts_with("ERR Function not found")
}

/// Whether Redis answered that it has no Functions (`FUNCTION` or `FCALL` unknown: before
/// Redis 7).
pub(super) fn lacks_functions(e: &FredError) -> bool {
    let details = e.details();
    details.starts_with("ERR unknown command") && {
        let lower = details.to_ascii_lowercase();
        lower.contains("fcall") || lower.contains("function")
    }
}

/// Sorts a client error into the `kind` label of `slidegate_store_errors_total`.
pub(super) fn map_error(e: FredError) -> StoreError {
    let details = e.details();
    // The node cannot serve now (a cluster failing over, a replica, a server loading its
    // data): the store is unavailable, as when the connection fails. A script sees the cluster
    // down when it first touches a key (its own error then says so).
    if ["CLUSTERDOWN", "MASTERDOWN", "LOADING", "READONLY"]
        .iter()
        .any(|p| details.starts_with(p))
        || details.contains("while the cluster is down")
    {
        return StoreError::Connection(e.to_string());
    }
    if details.starts_with("NOSCRIPT")
        || details.starts_with("ERR")
        || details.starts_with("WRONGTYPE")
        || details.starts_with("MOVED")
        || details.starts_with("ASK")
        || details.starts_with("CROSSSLOT")
    {
        return StoreError::Script(e.to_string());
    }
    match e.kind() {
        ErrorKind::Timeout => StoreError::Timeout(Duration::ZERO),
        ErrorKind::IO
        | ErrorKind::Canceled
        | ErrorKind::Backpressure
        | ErrorKind::Sentinel
        | ErrorKind::Tls
        | ErrorKind::Auth => StoreError::Connection(e.to_string()),
        ErrorKind::Routing | ErrorKind::Cluster => StoreError::Script(e.to_string()),
        ErrorKind::Parse
        | ErrorKind::Protocol
        | ErrorKind::InvalidArgument
        | ErrorKind::InvalidCommand => StoreError::Script(e.to_string()),
        _ => StoreError::Other(e.to_string()),
    }
}

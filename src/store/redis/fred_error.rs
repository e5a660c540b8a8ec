//! The client library's errors sorted: into the store's error kinds (the `kind` label of
//! `slidegate_store_errors_total`), and the replies that say a node lacks the script or the
//! library's functions (which a call recovers from by loading them).

use std::time::Duration;

use fred::error::{Error as FredError, ErrorKind};

use crate::store::StoreError;

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

/// Whether a call failed because a slot's migration holds only some of its keys (`TRYAGAIN`):
/// it did not run, and can once the migration ends.
pub(super) fn is_try_again(e: &StoreError) -> bool {
    matches!(e, StoreError::Script(details) if details.starts_with(TRY_AGAIN))
}

/// The reply of a node migrating a slot to a call on keys it holds only some of.
const TRY_AGAIN: &str = "TRYAGAIN";

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
    if details.starts_with("WRONGPASS") || details.starts_with("NOAUTH") {
        return StoreError::Refused(e.to_string());
    }
    // A redirection that was not followed: the call did not run (a call spanning several
    // slots, which the caller then sends again per key).
    if details.starts_with(TRY_AGAIN) {
        return StoreError::Script(details.to_string());
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
        | ErrorKind::Tls => StoreError::Connection(e.to_string()),
        ErrorKind::Auth => StoreError::Refused(e.to_string()),
        ErrorKind::Routing | ErrorKind::Cluster => StoreError::Script(e.to_string()),
        ErrorKind::Parse
        | ErrorKind::Protocol
        | ErrorKind::InvalidArgument
        | ErrorKind::InvalidCommand => StoreError::Script(e.to_string()),
        _ => StoreError::Other(e.to_string()),
    }
}

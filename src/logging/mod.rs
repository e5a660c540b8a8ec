//! Logging: everything goes to stderr through `tracing`. `SLIDEGATE_LOG` is an `EnvFilter`
//! (`info` by default); `SLIDEGATE_LOG_FORMAT=json` switches to JSON lines. The Redis client's
//! own lines (`fred`) are filtered out unless the filter names them: while Redis is down it
//! logs every reconnect attempt, and the gateway says once itself that the store is unreachable
//! and once when it is back ([`StoreHealth`]). Lines read as `tracing-subscriber`'s default
//! format writes them; [`PlainFields`] and [`LineTime`] only write them for less.

mod fields;
mod time;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tracing_subscriber::EnvFilter;

pub use fields::PlainFields;
pub use time::LineTime;

use crate::store::{local_now_us, StoreError};

/// Installs the subscriber for the gateway.
pub fn init() {
    let wanted = std::env::var("SLIDEGATE_LOG").unwrap_or_else(|_| "info".to_string());
    let directives = if wanted.contains("fred") {
        wanted.clone()
    } else {
        format!("{wanted},fred=off")
    };
    // A filter that does not parse logs at `info` and says so once the subscriber is in place:
    // an operator who asked for `debug` and got nothing must learn why.
    let (filter, refused) = match EnvFilter::try_new(&directives) {
        Ok(filter) => (filter, None),
        Err(e) => (EnvFilter::new("info,fred=off"), Some(e)),
    };
    let json = std::env::var("SLIDEGATE_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_timer(LineTime);
    if json {
        builder.json().init();
    } else {
        builder.fmt_fields(PlainFields).init();
    }
    if let Some(e) = refused {
        tracing::warn!("SLIDEGATE_LOG `{wanted}` is not a log filter ({e}); logging at info");
    }
}

/// Whether the store answers, as the decisions see it: each change is logged once ("store
/// unreachable: ...", "store is back after 3.2 s"), not every failed call. Replicas that do not
/// acknowledge (`store.replica_acks`) are an outage of their own: Redis still answers, and its
/// refusals (which wait for no replica) do not end it, only an allowed decision does.
#[derive(Default)]
pub struct StoreHealth {
    /// When the store stopped answering (µs since the epoch); 0 while it answers.
    down_since: AtomicU64,
    /// Whether the outage is the replicas' (their acknowledgements did not come).
    unreplicated: AtomicBool,
}

impl StoreHealth {
    /// A decision failed with `error`: the first failure of an outage is logged.
    pub fn failed(&self, error: &StoreError) {
        let now = local_now_us().max(1);
        if self
            .down_since
            .compare_exchange(0, now, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let unreplicated = matches!(error, StoreError::Unreplicated { .. });
        self.unreplicated.store(unreplicated, Ordering::Relaxed);
        match unreplicated {
            true => {
                tracing::warn!(error = %error, "store replicas do not acknowledge: {error}; allowed decisions follow their route's on_error until they do")
            }
            false => {
                tracing::warn!(error = %error, "store unreachable: {error}; routes follow their on_error until it answers")
            }
        }
    }

    /// A decision succeeded (`allowed` or not): the end of an outage is logged with its length.
    pub fn answered(&self, allowed: bool) {
        if self.down_since.load(Ordering::Relaxed) == 0 {
            return;
        }
        if !allowed && self.unreplicated.load(Ordering::Relaxed) {
            // a refusal waits for no replica: it says nothing of theirs
            return;
        }
        let since = self.down_since.swap(0, Ordering::AcqRel);
        if since > 0 {
            let secs = local_now_us().saturating_sub(since) as f64 / 1e6;
            tracing::info!(down_s = %format!("{secs:.1}"), "store is back after {secs:.1} s");
        }
    }
}

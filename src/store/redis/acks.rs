//! `store.replica_acks = N`: a call that may charge is followed by `WAIT n <store.timeout in
//! ms>` on its connection ([`super::send`]), n being N or every replica the master has when it
//! has fewer ([`super::replicas`]; no `WAIT` at all for a master without replicas), and the
//! call's allowed decisions are answered only once its reply says n replicas hold the charge.
//! Its reply is awaited apart from the call's: the lane sends its next call meanwhile, on the
//! same connection, behind the `WAIT` ([`super::lane`]). Fewer in time is a store error
//! ([`StoreError::Unreplicated`], `kind="timeout"`): the route's `on_error` decides, and the
//! charge stays where it is (over-counted if that master survives, never under-counted); the
//! master's replicas are then read again, and a replica it no longer has is no longer asked
//! for.
//!
//! A `WAIT` blocks its connection in Redis: the lane's next call, sent behind it, runs only
//! once it returns. So while the replicas lag (a `WAIT` came back short), the wait is a probe
//! of [`PROBE_SHARE`] of `store.timeout` ([`Replicas::lagging`]): a lagging replica still
//! sends the call's allowed decisions to `on_error`, sooner, and the calls behind it (their
//! refusals above all) no longer run out of their own time waiting for it. A `WAIT` that
//! counts enough replicas ends that, as does `ROLE` showing them caught up ([`super::replicas`]).
//!
//! What it promises: a failover that promotes a replica which acknowledged keeps every
//! allowed decision. Redis does not promise that the promoted replica is one that acknowledged
//! (Sentinel and Cluster both prefer the replica with the largest replication offset, which
//! holds every write any replica acknowledged, but a replica that lags or is excluded by its
//! priority may be chosen when no better one is reachable); the README explains what that means
//! for N = 1 with one or two replicas.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use fred::error::Error as FredError;
use fred::types::{ClusterHash, CustomCommand, Value};

use super::batch::{Answer, Pending, PendingSettlement};
use super::fred_error::map_error;
use super::replicas::Replicas;
use crate::store::StoreError;

/// How long past `WAIT`'s own timeout the gateway waits for its reply to arrive.
const REPLY_GRACE: Duration = Duration::from_millis(10);
/// While the replicas lag, a `WAIT` waits this share of `store.timeout` (at least 1 ms): a
/// replica that keeps up acknowledges within a round trip, long before it.
const PROBE_SHARE: u32 = 10;

/// A `WAIT` reply still to come.
pub type WaitReply = Pin<Box<dyn Future<Output = Result<Value, FredError>> + Send>>;

/// The acknowledgement a charging call waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckPolicy {
    replicas: u32,
    timeout: Duration,
}

/// One `WAIT` to send: how many replicas it asks for, on the node whose replicas it counts.
pub struct Wait {
    wanted: u32,
    replicas: Arc<Replicas>,
    /// The connection of `replicas`' master it goes out on.
    connection: u64,
    /// How long it waits: `store.timeout`, or a probe's share of it while the replicas lag.
    timeout: Duration,
}

/// The replicas' acknowledgement of what a command wrote: `WAIT`'s reply when it comes, and
/// what it asked for.
pub struct Acks {
    reply: WaitReply,
    wait: Wait,
}

impl AckPolicy {
    /// `replicas` acknowledgements within `timeout`; `None` for 0 (no waiting).
    pub fn new(replicas: u32, timeout: Duration) -> Option<AckPolicy> {
        (replicas > 0).then_some(AckPolicy { replicas, timeout })
    }

    /// `store.replica_acks`.
    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// The `WAIT` for a write on the master whose `replicas` these are: for as many as
    /// configured or every replica it has, whichever is fewer; `None` when that is none.
    pub fn wait_on(&self, replicas: &Arc<Replicas>) -> Option<Wait> {
        let wanted = replicas.wanted(self.replicas);
        let timeout = match replicas.lagging() {
            true => (self.timeout / PROBE_SHARE).max(Duration::from_millis(1)),
            false => self.timeout,
        };
        (wanted > 0).then(|| Wait {
            wanted,
            replicas: replicas.clone(),
            connection: replicas.connection(),
            timeout,
        })
    }
}

impl Wait {
    /// `WAIT wanted timeout_ms`.
    pub fn command(&self) -> (CustomCommand, Vec<Value>) {
        let millis = self.timeout.as_millis().clamp(1, i64::MAX as u128) as i64;
        (
            CustomCommand::new_static("WAIT", ClusterHash::Random, false),
            vec![Value::from(self.wanted as i64), Value::from(millis)],
        )
    }

    /// The acknowledgement `reply` (this `WAIT`'s) brings.
    pub fn with_reply(self, reply: WaitReply) -> Acks {
        Acks { reply, wait: self }
    }
}

impl Acks {
    /// Waits for `WAIT`'s reply (at most its timeout and [`REPLY_GRACE`]) and tells whether
    /// enough replicas acknowledged; a count is noted as the node's replicas seen, and ends a
    /// lag.
    pub async fn confirm(self) -> Result<(), StoreError> {
        let within = self.wait.timeout + REPLY_GRACE;
        let reply = tokio::time::timeout(within, self.reply).await;
        let judged = self.wait.judge(reply.ok());
        match &judged {
            Ok(acknowledged) => {
                let replicas = &self.wait.replicas;
                replicas.acknowledged(*acknowledged, self.wait.connection);
                replicas.caught_up(self.wait.connection);
            }
            // Fewer in time: the replicas lag, or one is gone, which only `ROLE` tells.
            Err(StoreError::Unreplicated { .. }) => self.wait.replicas.short(),
            Err(_) => {}
        }
        judged.map(drop)
    }
}

impl Wait {
    /// The verdict on `WAIT`'s reply (`None`: none came in time): how many acknowledged, when
    /// that is enough.
    fn judge(&self, reply: Option<Result<Value, FredError>>) -> Result<u32, StoreError> {
        let acknowledged = match reply {
            None => None,
            Some(Err(e)) => return Err(map_error(e)),
            Some(Ok(Value::Integer(n))) => Some(n.clamp(0, i64::from(u32::MAX)) as u32),
            Some(Ok(other)) => {
                return Err(StoreError::Script(format!(
                    "WAIT answered {other:?}, not a number of replicas"
                )))
            }
        };
        match acknowledged {
            Some(n) if n >= self.wanted => Ok(n),
            _ => Err(StoreError::Unreplicated {
                acknowledged: acknowledged.map(u64::from),
                wanted: self.wanted,
                within: self.timeout,
            }),
        }
    }
}

/// Answers the decisions that waited for the replicas once `acks` came: as decided, or (too
/// few replicas acknowledged) with the error, which each one's route counts and answers by its
/// `on_error`; their charge stays, but the slots they took are to be released (returned):
/// `on_error` answered their attempts.
/// With none held, the `WAIT` is only read, for the lag it tells.
pub async fn answer_acknowledged(
    (held, slots): (Vec<(Pending, Answer)>, Vec<PendingSettlement>),
    acks: Acks,
) -> Vec<PendingSettlement> {
    let confirmed = acks.confirm().await;
    for (p, answer) in held {
        let _ = p.reply.send(confirmed.clone().map(|()| answer));
    }
    match confirmed {
        Ok(()) => Vec::new(),
        Err(_) => slots,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(configured: u32, seen: Option<u32>) -> Option<Wait> {
        let replicas = Arc::new(Replicas::default());
        if let Some(n) = seen {
            replicas.acknowledged(n, replicas.connection());
        }
        AckPolicy::new(configured, Duration::from_millis(50))?.wait_on(&replicas)
    }

    #[test]
    fn wait_names_the_replicas_and_the_timeout_in_ms() {
        assert!(wait(0, None).is_none());
        let (command, args) = wait(2, None).unwrap().command();
        assert_eq!(command.cmd, "WAIT");
        assert_eq!(args, vec![Value::from(2), Value::from(50)]);
    }

    #[test]
    fn the_wait_asks_for_no_more_replicas_than_the_master_has() {
        assert!(wait(1, Some(0)).is_none(), "no replica: no wait");
        let (_, args) = wait(2, Some(1)).unwrap().command();
        assert_eq!(args[0], Value::from(1));
        let (_, args) = wait(2, Some(3)).unwrap().command();
        assert_eq!(args[0], Value::from(2));
    }

    #[test]
    fn while_the_replicas_lag_the_wait_is_a_probe() {
        let replicas = Arc::new(Replicas::default());
        let policy = AckPolicy::new(1, Duration::from_millis(200)).unwrap();
        let millis = |wait: Option<Wait>| wait.unwrap().command().1[1].clone();
        assert_eq!(millis(policy.wait_on(&replicas)), Value::from(200));
        replicas.short();
        assert_eq!(millis(policy.wait_on(&replicas)), Value::from(20));
        replicas.caught_up(replicas.connection());
        assert_eq!(millis(policy.wait_on(&replicas)), Value::from(200));
    }

    #[test]
    fn fewer_acknowledgements_than_asked_are_a_timeout() {
        let wait = wait(2, None).unwrap();
        assert_eq!(wait.judge(Some(Ok(Value::Integer(2)))).unwrap(), 2);
        assert_eq!(wait.judge(Some(Ok(Value::Integer(3)))).unwrap(), 3);
        for reply in [Some(Ok(Value::Integer(1))), None] {
            let error = wait.judge(reply).unwrap_err();
            assert_eq!(error.kind(), "timeout");
            assert!(matches!(error, StoreError::Unreplicated { wanted: 2, .. }));
        }
    }
}

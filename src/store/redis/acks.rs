//! `store.replica_acks = N`: a call that may charge is followed by `WAIT N <store.timeout in
//! ms>` on its connection ([`super::send`]), and the call's allowed decisions are answered only
//! once its reply says N replicas hold the charge. Fewer in time is a store error
//! ([`StoreError::Unreplicated`], `kind="timeout"`): the route's `on_error` decides, and the
//! charge stays where it is (over-counted if that master survives, never under-counted).
//!
//! What it promises: a failover that promotes a replica which acknowledged keeps every
//! allowed decision. Redis does not promise that the promoted replica is one that acknowledged
//! (Sentinel and Cluster both prefer the replica with the largest replication offset, which
//! holds every write any replica acknowledged, but a replica that lags or is excluded by its
//! priority may be chosen when no better one is reachable); the README explains what that means
//! for N = 1 with one or two replicas.

use std::time::Duration;

use fred::error::Error as FredError;
use fred::types::{ClusterHash, CustomCommand, Value};

use super::answer::map_error;
use super::send::Acks;
use crate::store::StoreError;

/// How long past `WAIT`'s own timeout the gateway waits for its reply to arrive.
const REPLY_GRACE: Duration = Duration::from_millis(10);

/// The acknowledgement a charging call waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckPolicy {
    replicas: u32,
    timeout: Duration,
}

impl AckPolicy {
    /// `replicas` acknowledgements within `timeout`; `None` for 0 (no waiting).
    pub fn new(replicas: u32, timeout: Duration) -> Option<AckPolicy> {
        (replicas > 0).then_some(AckPolicy { replicas, timeout })
    }

    /// `WAIT replicas timeout_ms`.
    pub fn command(&self) -> (CustomCommand, Vec<Value>) {
        let millis = self.timeout.as_millis().clamp(1, i64::MAX as u128) as i64;
        (
            CustomCommand::new_static("WAIT", ClusterHash::Random, false),
            vec![Value::from(self.replicas as i64), Value::from(millis)],
        )
    }

    /// Waits for `WAIT`'s reply (at most its timeout and [`REPLY_GRACE`]) and tells whether
    /// enough replicas acknowledged.
    pub async fn confirm(&self, acks: Acks) -> Result<(), StoreError> {
        let reply = tokio::time::timeout(self.timeout + REPLY_GRACE, acks).await;
        self.judge(reply.ok())
    }

    /// The verdict on `WAIT`'s reply (`None`: none came in time).
    fn judge(&self, reply: Option<Result<Value, FredError>>) -> Result<(), StoreError> {
        let acknowledged = match reply {
            None => None,
            Some(Err(e)) => return Err(map_error(e)),
            Some(Ok(Value::Integer(n))) => Some(n.max(0) as u64),
            Some(Ok(other)) => {
                return Err(StoreError::Script(format!(
                    "WAIT answered {other:?}, not a number of replicas"
                )))
            }
        };
        if acknowledged.is_some_and(|n| n >= u64::from(self.replicas)) {
            return Ok(());
        }
        Err(StoreError::Unreplicated {
            acknowledged,
            wanted: self.replicas,
            within: self.timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_names_the_replicas_and_the_timeout_in_ms() {
        assert_eq!(AckPolicy::new(0, Duration::from_millis(50)), None);
        let policy = AckPolicy::new(2, Duration::from_millis(50)).unwrap();
        let (command, args) = policy.command();
        assert_eq!(command.cmd, "WAIT");
        assert_eq!(args, vec![Value::from(2), Value::from(50)]);
    }

    #[test]
    fn fewer_acknowledgements_than_asked_are_a_timeout() {
        let policy = AckPolicy::new(2, Duration::from_millis(50)).unwrap();
        assert!(policy.judge(Some(Ok(Value::Integer(2)))).is_ok());
        assert!(policy.judge(Some(Ok(Value::Integer(3)))).is_ok());
        for reply in [Some(Ok(Value::Integer(1))), None] {
            let error = policy.judge(reply).unwrap_err();
            assert_eq!(error.kind(), "timeout");
            assert!(matches!(error, StoreError::Unreplicated { wanted: 2, .. }));
        }
    }
}

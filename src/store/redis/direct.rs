//! The lane's own client for its decision calls ([`Direct`]): the call (and `WAIT` right
//! behind it, in the same write, with `store.replica_acks`) goes from the lane's task straight
//! onto a connection of its own ([`super::direct_io`]), and the reply comes back in the same
//! task. It saves what the client library's path costs per call: the hop to the library's
//! routing task, that task's queues, the hop back through a channel.
//!
//! Differences from the client library's path (`SLIDEGATE_REDIS_CLIENT=fred` keeps that one
//! for every call, an A/B knob): only the decision calls of a lane go this way, and only to
//! the lane's own node; whatever else needs Redis (loading the code, admin commands, topology,
//! a cluster call redirected or split per key) keeps the library. While the lane's connection
//! is down (at start, after a failure, while it reconnects in the background) a call goes
//! through the library too, which fails fast while disconnected: a call never waits for a
//! reconnection. A `READONLY` answer (a Sentinel master that was demoted) closes the
//! connection, which reopens to the master the library's client follows, and the call goes
//! through the library meanwhile: it did not run. With TLS (`rediss://`), the library keeps
//! every call.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use fred::error::{Error as FredError, ErrorKind};
use fred::interfaces::ClientLike;
use tokio::sync::Notify;

use super::acks::{AckPolicy, Acks};
use super::direct_dial::{maintain, Endpoint};
use super::direct_io::Link;
use super::node::Node;
use super::resp::{push_array, push_bulk, push_value, Reply};

/// The environment variable that selects the client of decision calls: `fred` keeps the
/// client library's path; anything else (or unset) the lanes' own connections.
pub const CLIENT_SWITCH: &str = "SLIDEGATE_REDIS_CLIENT";

/// Whether lanes use their own connections (read once per process).
pub fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| {
        std::env::var(CLIENT_SWITCH).map_or(true, |v| !v.trim().eq_ignore_ascii_case("fred"))
    })
}

/// How long after the link's connection closed the library's client, if it still says it is
/// connected, is taken to have connected anew (it notices a close within a few ms).
const LIBRARY_NOTICES: Duration = Duration::from_millis(100);

/// A lane's own connection to its node.
pub struct Direct {
    link: Arc<Link>,
    node: Node,
}

/// What a call sent directly ended with: its reply, or `Unsent` (the caller sends it through
/// the client library instead).
pub enum Outcome {
    /// The reply, and the replicas' acknowledgement to wait for when asked and it succeeded.
    Done(Result<(Vec<i64>, Option<Acks>), FredError>),
    /// Not sent (disconnected), or refused without running (`READONLY`).
    Unsent,
}

impl Direct {
    /// The connection of a lane serving `node`, opened in the background; `None` when the
    /// switch says `fred` or the node's connection needs the library (TLS).
    pub fn start(node: Node) -> Option<Direct> {
        if !enabled() {
            return None;
        }
        let endpoint = Endpoint::of(&node)?;
        let dialer = Arc::new(Notify::new());
        let link = Arc::new(Link::new(dialer.clone()));
        tokio::spawn(maintain(Arc::downgrade(&link), dialer, endpoint));
        Some(Direct { link, node })
    }

    /// Sends the call `write` appends (`EVALSHA` or `FCALL` with its code, key count, keys and
    /// arguments) and, with `acks` and replicas to wait for, `WAIT` behind it in the same
    /// write; waits for the call's reply, not for `WAIT`'s.
    pub async fn call(
        &self,
        write: impl FnOnce(&mut Vec<u8>) -> bool,
        acks: Option<AckPolicy>,
    ) -> Outcome {
        let wait = acks.and_then(|policy| policy.wait_on(&self.node.replicas));
        let replies = 1 + usize::from(wait.is_some());
        let submitted = self.link.submit(replies, |out| {
            if !write(out) {
                return false;
            }
            let Some(wait) = &wait else {
                return true;
            };
            let (command, args) = wait.command();
            push_array(out, 1 + args.len());
            push_bulk(out, command.cmd.as_bytes());
            args.iter().all(|a| push_value(out, a))
        });
        let Some(mut replies) = submitted else {
            return self.unsent();
        };
        let waited = (replies.len() > 1).then(|| replies.pop()).flatten();
        let reply = match replies.pop() {
            Some(reply) => reply.await,
            None => return Outcome::Unsent,
        };
        if let Ok(Reply::Error(line)) = &reply {
            if line.starts_with("READONLY") {
                self.link.close("the server is a replica now");
                return Outcome::Unsent;
            }
        }
        let reply = reply.and_then(Reply::into_integers);
        let acks =
            match (&reply, wait, waited) {
                (Ok(_), Some(wait), Some(waited)) => Some(wait.with_reply(Box::pin(async move {
                    waited.await.and_then(Reply::into_value)
                }))),
                _ => None,
            };
        Outcome::Done(reply.map(|reply| (reply, acks)))
    }

    /// Sends one command (`args`, each a bulk string) on the link and waits for its reply;
    /// `None` when the link could not send it.
    pub async fn command(&self, args: &[&[u8]]) -> Option<Result<Reply, FredError>> {
        let mut replies = self.link.submit(1, |out| {
            push_array(out, args.len());
            args.iter().for_each(|a| push_bulk(out, a));
            true
        })?;
        Some(replies.pop()?.await)
    }

    /// What a call the link could not send ends with: before its first connection, or when
    /// the library's client is connected to another server than the link was (a Sentinel
    /// failover the link has not followed yet), or connected again since the link went down
    /// (a restarted server the link's dialer is still pausing for), the library's path (the
    /// dialer is told to try now); otherwise, while both reconnect, a connection error at once.
    fn unsent(&self) -> Outcome {
        let Some(last) = self.link.last_server() else {
            return Outcome::Unsent;
        };
        if self.link.connected_to().is_some() {
            return Outcome::Unsent;
        }
        let client = &self.node.client;
        if client.is_connected() {
            self.link.dialer.notify_one();
            // The library notices a closed connection at once (its reader is always reading):
            // connected a while after the link went down, it has connected anew.
            let reconnected = self.link.down_for().is_some_and(|d| d >= LIBRARY_NOTICES);
            if reconnected || client.active_connections().iter().all(|s| *s != last) {
                return Outcome::Unsent;
            }
        }
        let down = "the lane's connection to Redis is down (reconnecting)";
        Outcome::Done(Err(FredError::new(ErrorKind::IO, down)))
    }
}

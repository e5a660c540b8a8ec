//! Sending one command to the node that serves it ([`send`]), and following a cluster's
//! redirections there, all within the caller's deadline: `MOVED` (the slot table is patched
//! and read again, the command goes to the new node), `ASK` (`ASKING` and the command go to
//! the migration's target back to back, on one connection), `TRYAGAIN` (sent again after a
//! short pause, growing, until the migration ends or the deadline does), `READONLY` in a
//! cluster (sent to the promoted primary once the slot table names it). A redirected command
//! did not run, so nothing is charged twice.
//!
//! When the caller asks for it ([`AckPolicy`]), `WAIT` goes out right behind the command, in
//! the same write to the same connection: a `WAIT` sent once the reply is in could meet a
//! connection that broke and reconnected meanwhile, where nothing was written yet, and would
//! then acknowledge at once what no replica holds.

use std::task::Poll;
use std::time::Duration;

use fred::clients::{Client, Pipeline};
use fred::error::{Error as FredError, ErrorKind};
use fred::interfaces::ClientLike;
use fred::types::config::{Options, Server};
use fred::types::{ClusterHash, CustomCommand, Value};

use super::acks::{AckPolicy, Acks, Wait, WaitReply};
use super::fred_error::map_error;
use super::nodes::Nodes;
use super::redirect::Redirect;

/// Most redirections one command follows (`MOVED` and `ASK` together).
pub const MAX_REDIRECTIONS: usize = 8;
/// The first pause before a command that met `TRYAGAIN` is sent again; each next one doubles,
/// up to [`TRY_AGAIN_PAUSE_MAX`].
pub const TRY_AGAIN_PAUSE: Duration = Duration::from_millis(2);
/// The longest pause between two tries of a command that meets `TRYAGAIN`.
const TRY_AGAIN_PAUSE_MAX: Duration = Duration::from_millis(50);
/// How long a command that meets `READONLY` (a primary demoted by a failover) waits for the
/// slot table to name the promoted one (the caller's deadline ends it first).
const PROMOTION_WAIT: Duration = Duration::from_secs(2);
/// How long a command that keeps meeting `TRYAGAIN` is sent again. The caller's deadline
/// (`store.timeout`) ends it first; this only bounds a caller without one.
const TRY_AGAIN_FOR: Duration = Duration::from_secs(10);

/// Where a command goes.
#[derive(Debug, Clone)]
pub enum Route {
    /// The node serving this slot (outside a cluster, the one server); redirections are
    /// followed.
    Slot(u16),
    /// This cluster node, whatever it serves; its error replies are the caller's.
    Node(Server),
}

/// What a command that meets `TRYAGAIN` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnTryAgain {
    /// It is sent again, after a growing pause, until the migration ends or the deadline does.
    SendAgain,
    /// Its reply is the caller's, at once (the caller sends it again elsewhere, off a lane).
    Return,
}

/// A command's reply, and the acknowledgement asked for with it.
pub struct Sent {
    /// The command's reply (or the error it ended with).
    pub reply: Result<Value, FredError>,
    /// `WAIT`'s reply, from the node that ran the command; `None` when not asked for, when
    /// that node has no replica to wait for, or when the command failed.
    pub acks: Option<Acks>,
}

/// Sends `command` with `args` where `route` says, following redirections (`TRYAGAIN` as
/// `try_again` says); with `acks`, a `WAIT` goes out right behind the command that runs
/// (unless its node has no replica).
pub async fn send(
    nodes: &Nodes,
    route: Route,
    (command, args): (CustomCommand, Vec<Value>),
    acks: Option<AckPolicy>,
    try_again: OnTryAgain,
) -> Sent {
    let (mut target, follow) = match &route {
        Route::Slot(slot) => (nodes.for_slot(*slot), true),
        Route::Node(server) => (Some(nodes.node(server)), false),
    };
    let mut asking = false;
    let mut redirections = 0;
    let mut pause = TRY_AGAIN_PAUSE;
    // When the first `TRYAGAIN` came.
    let mut trying_since: Option<std::time::Instant> = None;
    while redirections < MAX_REDIRECTIONS {
        let Some(node) = target.take() else {
            nodes.request_refresh();
            return failed(FredError::new(
                ErrorKind::Cluster,
                "the cluster slot table names no node for this slot yet",
            ));
        };
        if node.is_connecting() {
            let _ = node.client.wait_for_connect().await;
        }
        let wait = acks.and_then(|policy| policy.wait_on(&node.replicas));
        let sent = if asking {
            asking_then(&node.client, &command, &args, wait).await
        } else {
            paired(&node.client, &command, &args, wait).await
        };
        let Err(error) = &sent.reply else {
            return sent;
        };
        let asked = node.server.clone().unwrap_or_else(|| Server::new("", 0));
        let redirect = follow
            .then(|| Redirect::parse(error.details(), &asked))
            .flatten();
        match redirect {
            Some(Redirect::Moved { slot, to }) => {
                nodes.moved(slot, to.clone());
                target = Some(nodes.node(&to));
                asking = false;
                redirections += 1;
            }
            Some(Redirect::Ask { to, .. }) => {
                target = Some(nodes.node(&to));
                asking = true;
                redirections += 1;
            }
            // The slot is migrating and the command's keys are split between the two nodes,
            // or exist on neither: it can run once the migration ends, so it is sent again
            // until then (within the caller's deadline), never counted as a failure.
            Some(Redirect::TryAgain)
                if try_again == OnTryAgain::SendAgain
                    && trying_since
                        .get_or_insert_with(std::time::Instant::now)
                        .elapsed()
                        < TRY_AGAIN_FOR =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(TRY_AGAIN_PAUSE_MAX);
                target = Some(node);
            }
            Some(Redirect::TryAgain) => return sent,
            None if nodes.is_cluster() && is_readonly(error) => match route {
                // The slot's primary is a replica now: sent to the one promoted, once the
                // table names it.
                Route::Slot(slot) => {
                    target = nodes.new_primary(slot, &asked, PROMOTION_WAIT).await;
                    if target.is_none() {
                        nodes.note_failure(&map_error(error.clone()));
                        return sent;
                    }
                    asking = false;
                    redirections += 1;
                }
                // A call on this node's slots: each key's part goes where its slot is now.
                Route::Node(_) => {
                    nodes.request_refresh();
                    return failed(FredError::new(
                        ErrorKind::Cluster,
                        "ERR the node is a replica now (READONLY): deciding per key",
                    ));
                }
            },
            None => {
                nodes.note_failure(&map_error(error.clone()));
                return sent;
            }
        }
    }
    failed(FredError::new(
        ErrorKind::Cluster,
        format!("more than {MAX_REDIRECTIONS} cluster redirections"),
    ))
}

/// Whether the node answered that it is a replica (a primary a failover demoted).
fn is_readonly(error: &FredError) -> bool {
    error.details().starts_with("READONLY")
}

fn failed(error: FredError) -> Sent {
    Sent {
        reply: Err(error),
        acks: None,
    }
}

/// How every command is sent: failing at once while the connection is down (the caller's
/// route falls to `on_error` rather than waiting out a reconnection), never sent twice by the
/// client library, and never redirected by it.
fn options() -> Options {
    Options {
        fail_fast: true,
        max_attempts: Some(1),
        ..Default::default()
    }
}

/// The command, and `WAIT` right behind it when asked: both are handed to the client in one
/// poll, so they leave on the same connection one after the other. The command's reply is
/// returned as soon as it comes; `WAIT`'s stays to be awaited.
async fn paired(
    client: &Client,
    command: &CustomCommand,
    args: &[Value],
    wait: Option<Wait>,
) -> Sent {
    let mut reply = owned(client, command.clone(), args.to_vec());
    let mut wait = wait.map(|wait| {
        let (command, args) = wait.command();
        (owned(client, command, args), wait)
    });
    let mut waited = None;
    let reply = std::future::poll_fn(|cx| {
        let reply = reply.as_mut().poll(cx);
        if let (Some((wait, _)), None) = (wait.as_mut(), &waited) {
            if let Poll::Ready(acks) = wait.as_mut().poll(cx) {
                waited = Some(acks);
            }
        }
        reply
    })
    .await;
    let acks = match (reply.is_ok(), waited, wait) {
        (true, Some(done), Some((_, wait))) => {
            Some(wait.with_reply(Box::pin(std::future::ready(done))))
        }
        (true, None, Some((pending, wait))) => Some(wait.with_reply(pending)),
        _ => None,
    };
    Sent { reply, acks }
}

/// One command as a future that owns what it needs; boxed, since the client's command future
/// is kilobytes large and every future that waits on it would otherwise hold a copy.
fn owned(client: &Client, command: CustomCommand, args: Vec<Value>) -> WaitReply {
    let client = client.clone();
    Box::pin(async move { client.with_options(&options()).custom(command, args).await })
}

/// `ASKING`, the command and (when asked) `WAIT`, pipelined: written together, so `ASKING`
/// applies to the command on the same connection.
async fn asking_then(
    client: &Client,
    command: &CustomCommand,
    args: &[Value],
    wait: Option<Wait>,
) -> Sent {
    let pipeline = Pipeline::from(client.with_options(&options()));
    let asking = CustomCommand::new_static("ASKING", ClusterHash::Random, false);
    let queued: Result<(), FredError> = async {
        let _: () = pipeline.custom(asking, Vec::<Value>::new()).await?;
        let _: () = pipeline.custom(command.clone(), args.to_vec()).await?;
        if let Some(wait) = &wait {
            let (command, args) = wait.command();
            let _: () = pipeline.custom(command, args).await?;
        }
        Ok(())
    }
    .await;
    if let Err(e) = queued {
        return failed(e);
    }
    let mut replies = Box::pin(pipeline.try_all::<Value>()).await.into_iter();
    let reply = match (replies.next(), replies.next()) {
        (Some(Err(e)), _) => Err(e),
        (Some(Ok(_)), Some(reply)) => reply,
        _ => Err(FredError::new(
            ErrorKind::Protocol,
            "a pipeline reply is missing",
        )),
    };
    let acks = match (&reply, replies.next(), wait) {
        (Ok(_), Some(done), Some(wait)) => {
            Some(wait.with_reply(Box::pin(std::future::ready(done))))
        }
        _ => None,
    };
    Sent { reply, acks }
}

//! One decision call: [`Caller`] packs a lane's [`Batch`] into KEYS and ARGV (the layout
//! `lua/decide.lua` documents), sends it with `FCALL` to the Functions library or with
//! `EVALSHA` (whichever [`Code`] says; loading the code again on "Function not found" or
//! `NOSCRIPT`, within the same deadline) and hands each decision its part of the reply.
//!
//! In a cluster a lane serves one primary node and its calls use the `allow-cross-slot-keys`
//! script (Redis 7). When such a call fails for a reason other than the connection (a node
//! that no longer serves one of its slots during a reshard, a server without script flags),
//! its contents are sent again one call per key, each routed by its slot, so that
//! [`super::send`] follows the redirections (a call per key rather than per slot: Redis
//! answers a call on several keys of a migrating slot with `TRYAGAIN` while some of them have
//! not moved, or do not exist). A call per key that meets `TRYAGAIN` is sent again until the
//! migration ends, within its deadline, but apart from the lane ([`Trailing`]): one key caught
//! halfway through a migration must not hold back the decisions of every other key of its node.
//!
//! With `store.replica_acks`, a call that may charge is followed by `WAIT` on its connection;
//! its allowed decisions are answered once that says enough replicas hold them, the others at
//! once. The call itself ends with its reply: what waits for `WAIT` is handed back to the lane
//! ([`Trailing`]), which sends its next call meanwhile.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::error::Error as FredError;
use fred::types::config::Server;
use fred::types::{Key, Value};

use super::acks::{answer_acknowledged, AckPolicy, Acks};
use super::batch::{Answer, Batch, Pending, PendingSettlement};
use super::code::{Code, Shared};
use super::deadline::Deadline;
use super::direct::Direct;
use super::dispatch::{dispatch, Call};
use super::encode::{call_token, decision_member, encode, instance_id};
use super::fred_error::{
    is_function_missing, is_noscript, is_try_again, lacks_functions, map_error,
};
use super::node::Node;
use super::nodes::Nodes;
use super::release::{self, fail_keeping_releases};
use super::send::OnTryAgain;
use crate::config::ClockSource;
use crate::store::{Decision, StoreError};

/// What a call leaves running once it has handed its lane back: allowed decisions whose answers
/// wait for the replicas' acknowledgement, calls per key sent again after `TRYAGAIN`. It ends
/// with the releases of the slots those decisions took and could not keep, to send.
pub type Trailing = Pin<Box<dyn Future<Output = Vec<PendingSettlement>> + Send>>;

/// What a call leaves its lane: answers still on their way, and, when it failed, the releases
/// of the slots it may have left behind, to send again ([`super::release`]).
#[derive(Default)]
pub struct Called {
    /// The decisions not answered yet: waiting for the replicas, or for a slot's migration.
    pub trailing: Option<Trailing>,
    /// Releases to send with the lane's next calls.
    pub releases: Vec<PendingSettlement>,
}

/// Where a lane's calls go.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// The one server (standalone or the sentinel's master), or in a cluster the node that
    /// serves the first key's slot, as the slot table says (redirections followed).
    ByKey,
    /// One cluster primary: calls carry keys of several of its slots.
    Node(Server),
    /// A cluster whose slot table is not known yet: one call per key, routed by its slot.
    PerSlot,
}

/// What every lane of a worker shares: the connections, the decision code, the clock, the call
/// tokens.
pub struct Caller {
    nodes: Arc<Nodes>,
    clock: ClockSource,
    code: Code,
    instance: String,
    sequence: AtomicU64,
    /// `store.timeout`: the most one call may take once sent.
    timeout: Duration,
    /// `store.replica_acks`: the acknowledgement a charging call waits for.
    acks: Option<AckPolicy>,
    on_error: Arc<dyn Fn(&StoreError) + Send + Sync>,
}

impl Caller {
    /// A caller on `nodes` whose calls each take at most `timeout` once sent (and, with
    /// `acks`, whose charges wait for the replicas); `on_error` sees every failed call that
    /// carried no decision, once (a decision's failure is counted where it is answered);
    /// `shared` (which code the calls run) is shared with the other workers' callers.
    pub fn new(
        nodes: Arc<Nodes>,
        clock: ClockSource,
        timeout: Duration,
        acks: Option<AckPolicy>,
        on_error: Arc<dyn Fn(&StoreError) + Send + Sync>,
        shared: Shared,
    ) -> Caller {
        Caller {
            code: Code::new(nodes.clone(), shared),
            nodes,
            clock,
            instance: instance_id(),
            sequence: AtomicU64::new(0),
            timeout,
            acks,
            on_error,
        }
    }

    /// Loads the decision code on every node.
    pub async fn load_code(&self) -> Result<(), StoreError> {
        self.code.load().await
    }

    /// Whether cluster lanes may carry several slots per call.
    pub fn cross_slot(&self) -> bool {
        self.code.cross_slot()
    }

    /// A token unique to one call.
    fn token(&self) -> String {
        call_token(
            &self.instance,
            self.sequence.fetch_add(1, Ordering::Relaxed),
        )
    }

    /// Runs one call for `batch` and answers everything in it, except the allowed decisions
    /// that wait for the replicas: those are answered by what it returns. `direct` is the
    /// lane's own connection to its node, if it has one.
    pub async fn call(
        self: &Arc<Self>,
        target: &Target,
        direct: Option<&Direct>,
        batch: Batch,
    ) -> Called {
        let deadline = batch.deadline();
        let token = self.token();
        let result = match target {
            Target::Node(_) if self.cross_slot() => {
                match self
                    .bounded(deadline)
                    .run(self.attempt(target, direct, &batch, &token, OnTryAgain::Return))
                    .await
                {
                    Err(StoreError::Script(why)) => {
                        tracing::debug!(%why, "cross-slot call refused; deciding per key");
                        return self.call_per_key(batch, deadline).await;
                    }
                    other => other,
                }
            }
            Target::Node(_) | Target::PerSlot => return self.call_per_key(batch, deadline).await,
            Target::ByKey => {
                let attempt = self.attempt(target, direct, &batch, &token, OnTryAgain::SendAgain);
                self.bounded(deadline).run(attempt).await
            }
        };
        self.answer(batch, result, &token)
    }

    /// The deadline of an attempt sent now: its contents' own, and at most `store.timeout`
    /// from now. A batch's deadline covers all of its calls (`store.timeout` per call), but one
    /// call that gets no answer (Redis died with it in flight) must not hold the lane, and
    /// every decision queued behind it, for the whole batch's budget.
    fn bounded(&self, deadline: Deadline) -> Deadline {
        deadline.min(Deadline::after(self.timeout))
    }

    /// The cluster fallback: one call per key (what share the same keys, in arrival order),
    /// each routed by its slot. These calls run at once and may each load a flushed script
    /// again, so together they keep the contents' own deadline. The lane is handed back once
    /// each has been answered or met `TRYAGAIN`: those are sent again apart ([`Trailing`]).
    async fn call_per_key(self: &Arc<Self>, batch: Batch, deadline: Deadline) -> Called {
        let calls = batch.per_key().into_iter().map(|group| async move {
            let token = self.token();
            let once = self.attempt(&Target::ByKey, None, &group, &token, OnTryAgain::Return);
            match deadline.run(once).await {
                Err(e) if is_try_again(&e) => Err((group, token)),
                result => Ok(self.answer(group, result, &token)),
            }
        });
        let mut trailing: Vec<Trailing> = Vec::new();
        let mut releases = Vec::new();
        for outcome in futures_util::future::join_all(calls).await {
            match outcome {
                Ok(called) => {
                    trailing.extend(called.trailing);
                    releases.extend(called.releases);
                }
                Err(group) => trailing.push(Box::pin(self.clone().once_migrated(group, deadline))),
            }
        }
        let trailing = (!trailing.is_empty()).then(|| {
            Box::pin(async move {
                let released = futures_util::future::join_all(trailing).await;
                released.into_iter().flatten().collect()
            }) as Trailing
        });
        Called { trailing, releases }
    }

    /// Sends a call per key that met `TRYAGAIN` again (under the token it was first sent with:
    /// it did not run) until its slot's migration ends or its deadline passes, and answers it;
    /// ends with the releases its failure leaves.
    async fn once_migrated(
        self: Arc<Self>,
        (group, token): (Batch, String),
        deadline: Deadline,
    ) -> Vec<PendingSettlement> {
        let again = self.attempt(&Target::ByKey, None, &group, &token, OnTryAgain::SendAgain);
        let result = deadline.run(again).await;
        let Called {
            trailing,
            mut releases,
        } = self.answer(group, result, &token);
        if let Some(trailing) = trailing {
            releases.extend(trailing.await);
        }
        releases
    }

    /// Sends the call (loading the code again once when the server lost it) and returns the
    /// reply, with the replicas' acknowledgement when the call may charge and
    /// `store.replica_acks` asks for one.
    async fn attempt(
        &self,
        target: &Target,
        direct: Option<&Direct>,
        batch: &Batch,
        token: &str,
        try_again: OnTryAgain,
    ) -> Result<(Vec<i64>, Option<Acks>), StoreError> {
        let sending = (self.acks.filter(|_| may_charge(batch)), try_again);
        let (keys, args) = encode(batch, token, self.clock, !self.nodes.is_cluster());
        let call = (keys.as_slice(), args.as_slice());
        let fcall = ("FCALL", self.code.library().function.as_str());
        if self.code.uses_functions() {
            match self.run(target, direct, fcall, call, sending).await {
                Err(e) if is_function_missing(&e) => {
                    self.code.reload(direct, None).await?;
                    return self
                        .run(target, direct, fcall, call, sending)
                        .await
                        .map_err(map_error);
                }
                Err(e) if lacks_functions(&e) => self.code.without_functions(&e)?,
                other => return other.map_err(map_error),
            }
        }
        let script = self.code.script(matches!(target, Target::Node(_)));
        let evalsha = ("EVALSHA", script.sha.as_str());
        match self.run(target, direct, evalsha, call, sending).await {
            Err(e) if self.code.after_noscript(&e).await => self
                .run(target, direct, fcall, call, sending)
                .await
                .map_err(map_error),
            Err(e) if is_noscript(&e) => {
                self.code.reload(direct, Some(script)).await?;
                self.run(target, direct, evalsha, call, sending)
                    .await
                    .map_err(map_error)
            }
            other => other.map_err(map_error),
        }
    }

    /// Sends `name code numkeys keys... args...` (`EVALSHA` of a script's SHA, or `FCALL` of
    /// the library's function) where `target` says ([`dispatch`]: on `direct`, the lane's own
    /// connection, when it is up).
    async fn run(
        &self,
        target: &Target,
        direct: Option<&Direct>,
        (name, code): (&'static str, &str),
        (keys, args): (&[Key], &[Value]),
        (acks, try_again): (Option<AckPolicy>, OnTryAgain),
    ) -> Result<(Vec<i64>, Option<Acks>), FredError> {
        let node = match target {
            Target::Node(server) => Some(server),
            _ => None,
        };
        let call = Call {
            name,
            code,
            keys,
            args,
            try_again,
        };
        dispatch(&self.nodes, direct, node, call, acks).await
    }

    /// The node whose lane serves `target`, when it is one node (the one server, or a cluster
    /// primary): a lane's own connection goes there ([`Direct`]).
    pub fn own_node(&self, target: &Target) -> Option<Node> {
        match target {
            Target::Node(server) => Some(self.nodes.node(server)),
            Target::ByKey if !self.nodes.is_cluster() => self.nodes.for_slot(0),
            Target::ByKey | Target::PerSlot => None,
        }
    }

    /// Hands each decision its part of the reply and tells each settlement it is done (or
    /// gives everything the call's error, counted here only when no decision carries it, and
    /// keeps the releases of the slots it may have left behind). With an acknowledgement to
    /// wait for, the allowed decisions that charged are answered by the future returned, once
    /// it came (or with its error).
    fn answer(
        &self,
        batch: Batch,
        result: Result<(Vec<i64>, Option<Acks>), StoreError>,
        token: &str,
    ) -> Called {
        let (reply, acks) = match result {
            Ok(done) => done,
            Err(e) => {
                self.nodes.note_failure(&e);
                self.count_undecided(&batch, &e);
                return Called {
                    trailing: None,
                    releases: fail_keeping_releases(batch, e, token),
                };
            }
        };
        let Some((&now, mut rest)) = reply.split_first() else {
            let e = StoreError::Script("empty reply".into());
            self.count_undecided(&batch, &e);
            batch.fail(e);
            return Called::default();
        };
        for s in batch.settlements {
            s.tell(Ok(()));
        }
        let dry = batch.dry;
        let mut held: Vec<(Pending, Answer)> = Vec::new();
        let mut held_slots = Vec::new();
        for (d, p) in batch.decisions.into_iter().enumerate() {
            let len = Decision::reply_len(&p.limits);
            if rest.len() < len {
                let _ = p.reply.send(Err(StoreError::Script(format!(
                    "reply too short: {} values left, {len} expected",
                    rest.len()
                ))));
                continue;
            }
            let (mine, others) = rest.split_at(len);
            rest = others;
            let answer = Answer {
                values: mine.to_vec(),
                decided_at_us: now.max(0) as u64,
                member: p.receipt.then(|| decision_member(token, d + 1)),
            };
            if acks.is_some() && charged(&p, &answer, dry) {
                held_slots.extend(release::of_decision(&p, token, d));
                held.push((p, answer));
            } else {
                let _ = p.reply.send(Ok(answer));
            }
        }
        // a `WAIT` that holds no decision back is still read: its count tells whether the
        // replicas lag (then the next waits are probes), which the calls behind it depend on
        let trailing = acks.map(|acks| {
            let held = (held, held_slots);
            Box::pin(answer_acknowledged(held, acks)) as Trailing
        });
        Called {
            trailing,
            releases: Vec::new(),
        }
    }

    /// Counts the failure of a call that carried no decision (settlements alone): each
    /// decision's failure is counted once by whoever answers it (`on_error` of its route).
    fn count_undecided(&self, batch: &Batch, error: &StoreError) {
        if batch.decisions.is_empty() {
            (self.on_error)(error);
        }
    }
}

/// Whether a call may charge anything (a decision that spends units outside a dry run).
fn may_charge(batch: &Batch) -> bool {
    !batch.dry && batch.decisions.iter().any(|d| d.cost > 0)
}

/// Whether a decision's answer charged: allowed, spending units, outside a dry run.
fn charged(p: &Pending, answer: &Answer, dry: bool) -> bool {
    !dry && p.cost > 0 && answer.values.first() == Some(&1)
}

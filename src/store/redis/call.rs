//! One script call: [`Caller`] packs a lane's [`Batch`] into KEYS and ARGV (the layout
//! `lua/decide.lua` documents), sends it with `EVALSHA` (loading the script again on
//! `NOSCRIPT`, within the same deadline) and hands each decision its part of the reply.
//!
//! In a cluster a lane serves one primary node and its calls use the `allow-cross-slot-keys`
//! script (Redis 7). When such a call fails for a reason other than the connection (a MOVED or
//! ASK during resharding, a server without script flags), its contents are sent again one call
//! per slot, routed by their own keys, so the client library follows the redirections.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::error::Error as FredError;
use fred::interfaces::{ClientLike, LuaInterface};
use fred::types::cluster::ClusterRouting;
use fred::types::config::{Options, Server};
use fred::types::{ClusterHash, CustomCommand, Key, Value};

use super::deadline::Deadline;
use super::encode::{call_token, encode, instance_id};
use super::lane::{Answer, Batch};
use super::script::{Script, Scripts};
use super::{is_noscript, map_error};
use crate::config::ClockSource;
use crate::store::{Decision, StoreError};

/// Where a lane's calls go.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// The one server (standalone or the sentinel's master), or in a cluster the node that owns
    /// the first key's slot, as the client library routes it.
    ByKey,
    /// One cluster primary: calls carry keys of several of its slots.
    Node(Server),
    /// A cluster whose slot table is not known yet: one call per slot, routed by key.
    PerSlot,
}

/// What every lane of a worker shares: the client, the scripts, the clock, the call tokens.
pub struct Caller {
    client: Client,
    clock: ClockSource,
    scripts: Scripts,
    instance: String,
    sequence: AtomicU64,
    /// `store.timeout`: the most one call may take once sent.
    timeout: Duration,
    /// Whether the cross-slot script loaded (Redis 7); if not, cluster calls go per slot.
    /// Shared by every worker's caller.
    cross_slot: Arc<AtomicBool>,
    on_error: Arc<dyn Fn(&StoreError) + Send + Sync>,
}

impl Caller {
    /// A caller for `client` whose calls each take at most `timeout` once sent; `on_error` sees
    /// every failed call once; `cross_slot` is shared with the other workers' callers.
    pub fn new(
        client: Client,
        clock: ClockSource,
        timeout: Duration,
        on_error: Arc<dyn Fn(&StoreError) + Send + Sync>,
        cross_slot: Arc<AtomicBool>,
    ) -> Caller {
        Caller {
            client,
            clock,
            scripts: Scripts::new(),
            instance: instance_id(),
            sequence: AtomicU64::new(0),
            timeout,
            cross_slot,
            on_error,
        }
    }

    /// Loads the script on every node; a cross-slot form that does not load (Redis < 7) turns
    /// cross-slot calls off.
    pub async fn load_scripts(&self) -> Result<(), StoreError> {
        self.load(&self.scripts.plain).await?;
        if self.client.is_clustered() && self.cross_slot.load(Ordering::Relaxed) {
            if let Err(e) = self.load(&self.scripts.cross_slot).await {
                tracing::warn!(error = %e, "Redis refused the cross-slot script (needs Redis 7); cluster decisions go one call per slot");
                self.cross_slot.store(false, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    async fn load(&self, script: &Script) -> Result<(), StoreError> {
        let loaded: Result<Value, FredError> = if self.client.is_clustered() {
            self.client.script_load_cluster(script.lua.as_str()).await
        } else {
            self.client.script_load(script.lua.as_str()).await
        };
        loaded.map(|_| ()).map_err(map_error)
    }

    /// Whether cluster lanes may carry several slots per call.
    pub fn cross_slot(&self) -> bool {
        self.cross_slot.load(Ordering::Relaxed)
    }

    /// A token unique to one call.
    fn token(&self) -> String {
        call_token(
            &self.instance,
            self.sequence.fetch_add(1, Ordering::Relaxed),
        )
    }

    /// Runs one call for `batch` and answers everything in it.
    pub async fn call(&self, target: &Target, batch: Batch) {
        let deadline = batch.deadline();
        let token = self.token();
        let result = match target {
            Target::Node(_) if self.cross_slot() => {
                match self
                    .bounded(deadline)
                    .run(self.attempt(target, &batch, &token))
                    .await
                {
                    Err(StoreError::Script(why)) => {
                        tracing::debug!(%why, "cross-slot call refused; deciding per slot");
                        return self.call_per_slot(batch, deadline).await;
                    }
                    other => other,
                }
            }
            Target::Node(_) | Target::PerSlot => return self.call_per_slot(batch, deadline).await,
            Target::ByKey => {
                self.bounded(deadline)
                    .run(self.attempt(target, &batch, &token))
                    .await
            }
        };
        self.answer(batch, result, &token);
    }

    /// The deadline of an attempt sent now: its contents' own, and at most `store.timeout`
    /// from now. A batch's deadline covers all of its calls (`store.timeout` per call), but one
    /// call that gets no answer (Redis died with it in flight) must not hold the lane, and
    /// every decision queued behind it, for the whole batch's budget.
    fn bounded(&self, deadline: Deadline) -> Deadline {
        deadline.min(Deadline::after(self.timeout))
    }

    /// The cluster fallback: one call per slot, routed by the client library. These calls run
    /// at once and may each load a flushed script again, so together they keep the contents'
    /// own deadline.
    async fn call_per_slot(&self, batch: Batch, deadline: Deadline) {
        let slot_of = |keys: &[Key]| {
            keys.first()
                .map_or(0, |k| ClusterRouting::hash_key(k.as_bytes()))
        };
        let dry = batch.dry;
        let mut by_slot: HashMap<u16, Batch> = HashMap::new();
        for s in batch.settlements {
            by_slot
                .entry(slot_of(&s.keys))
                .or_default()
                .settlements
                .push(s);
        }
        for d in batch.decisions {
            by_slot
                .entry(slot_of(&d.keys))
                .or_default()
                .decisions
                .push(d);
        }
        let calls = by_slot.into_values().map(|mut group| async move {
            group.dry = dry;
            let token = self.token();
            let result = deadline
                .run(self.attempt(&Target::ByKey, &group, &token))
                .await;
            self.answer(group, result, &token);
        });
        futures_util::future::join_all(calls).await;
    }

    /// Sends the call (loading the script again once on `NOSCRIPT`) and returns the reply.
    async fn attempt(
        &self,
        target: &Target,
        batch: &Batch,
        token: &str,
    ) -> Result<Vec<i64>, StoreError> {
        let script = match target {
            Target::Node(_) => &self.scripts.cross_slot,
            Target::ByKey | Target::PerSlot => &self.scripts.plain,
        };
        let (keys, args) = encode(batch, token, self.clock);
        match self
            .evalsha(target, script, keys.clone(), args.clone())
            .await
        {
            Err(e) if is_noscript(&e) => {
                self.load(script).await?;
                self.evalsha(target, script, keys, args)
                    .await
                    .map_err(map_error)
            }
            other => other.map_err(map_error),
        }
    }

    async fn evalsha(
        &self,
        target: &Target,
        script: &Script,
        keys: Vec<Key>,
        args: Vec<Value>,
    ) -> Result<Vec<i64>, FredError> {
        // A call routed by its slot in a cluster may meet one redirection while a slot moves
        // (MOVED, or ASK during a migration): it gets a second attempt to follow it. fred sends
        // ASKING with the command's remaining attempts, so with one attempt an ASK could never
        // complete and the failure ends the client's routing task. A redirected command did not
        // run, and `fail_fast` keeps fred from sending a command again after a disconnect, so
        // no decision is ever made twice. (fred reads `max_redirections: Some(0)` as unset, so a
        // cross-slot call follows one redirection too; on a node that no longer serves every
        // slot of the call the script refuses it, and the call is split per slot.)
        let follows_redirection = self.client.is_clustered() && !matches!(target, Target::Node(_));
        let options = Options {
            fail_fast: true,
            max_attempts: Some(if follows_redirection { 2 } else { 1 }),
            cluster_node: match target {
                Target::Node(server) => Some(server.clone()),
                Target::ByKey | Target::PerSlot => None,
            },
            max_redirections: Some(1),
            ..Default::default()
        };
        // Sent as a custom command: fred 10 has no `LuaInterface` for `WithOptions`, so
        // `.with_options(..).evalsha(..)` reaches the plain client through `Deref` and drops
        // every option above (a call would wait out a reconnection instead of failing fast, be
        // sent again after one, and follow redirections). Routed by its first key's slot, as
        // `evalsha` routes it.
        let slot = keys
            .first()
            .map_or(0, |k| ClusterRouting::hash_key(k.as_bytes()));
        let mut command = Vec::with_capacity(2 + keys.len() + args.len());
        command.push(Value::from(script.sha.as_str()));
        if matches!(target, Target::Node(_)) {
            // Redis checks declared keys for one slot even under allow-cross-slot-keys: a call
            // spanning slots of one node passes its keys after the arguments (lua/decide.lua).
            command.push(Value::from(0));
            command.extend(args);
            command.extend(keys.into_iter().map(Value::from));
        } else {
            command.push(Value::from(keys.len() as i64));
            command.extend(keys.into_iter().map(Value::from));
            command.extend(args);
        }
        let evalsha = CustomCommand::new_static("EVALSHA", ClusterHash::Custom(slot), false);
        // Boxed: the client's command future is kilobytes large, and every future that waits on
        // this one (the attempt, its deadline, the lane's call) would otherwise hold a copy and
        // move it.
        Box::pin(self.client.with_options(&options).custom(evalsha, command)).await
    }

    /// Hands each decision its part of the reply and tells each settlement it is done (or
    /// gives everything the call's error, counted once).
    fn answer(&self, batch: Batch, result: Result<Vec<i64>, StoreError>, token: &str) {
        let reply = match result {
            Ok(reply) => reply,
            Err(e) => {
                (self.on_error)(&e);
                return batch.fail(e);
            }
        };
        let Some((&now, mut rest)) = reply.split_first() else {
            let e = StoreError::Script("empty reply".into());
            (self.on_error)(&e);
            return batch.fail(e);
        };
        for s in batch.settlements {
            let _ = s.done.send(Ok(()));
        }
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
            let _ = p.reply.send(Ok(Answer {
                values: mine.to_vec(),
                decided_at_us: now.max(0) as u64,
                member: p.receipt.then(|| format!("{token}{}", d + 1)),
            }));
        }
    }
}

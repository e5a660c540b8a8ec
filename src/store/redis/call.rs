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
use super::lane::{Answer, Batch, PendingSettlement};
use super::script::{Script, Scripts};
use super::{is_noscript, map_error};
use crate::config::ClockSource;
use crate::store::{local_now_us, Decision, LimitSet, StoreError};

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
        let calls = by_slot.into_values().map(|group| async move {
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
        let (keys, args) = self.encode(batch, token);
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
        let options = Options {
            fail_fast: true,
            max_attempts: Some(1),
            cluster_node: match target {
                Target::Node(server) => Some(server.clone()),
                Target::ByKey | Target::PerSlot => None,
            },
            // A cross-slot call that meets a redirection is split per slot instead.
            max_redirections: matches!(target, Target::Node(_)).then_some(0),
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

    /// KEYS and ARGV of one call, in the layout `lua/decide.lua` documents.
    fn encode(&self, batch: &Batch, token: &str) -> (Vec<Key>, Vec<Value>) {
        let fixed = batch.decisions.first().and_then(|d| d.fixed_now);
        let now = match (fixed, self.clock) {
            (Some(now), _) => Value::from(now as i64),
            (None, ClockSource::Local) => Value::from(local_now_us() as i64),
            (None, ClockSource::Redis) => Value::from(""),
        };
        let mut plans: Vec<&Arc<LimitSet>> = Vec::new();
        // A settlement that refunds some limits and resets others is two entries, one per kind.
        let settlements: Vec<(i64, &str, &PendingSettlement, &Vec<usize>)> = batch
            .settlements
            .iter()
            .flat_map(|s| [("r", &s.refund), ("x", &s.reset)].map(|(kind, l)| (s, kind, l)))
            .filter(|(_, _, limits)| !limits.is_empty())
            .collect::<Vec<_>>()
            .into_iter()
            .map(|(s, kind, limits)| (plan_index(&mut plans, &s.limits), kind, s, limits))
            .collect();
        let decide_plans: Vec<i64> = batch
            .decisions
            .iter()
            .map(|d| plan_index(&mut plans, &d.limits))
            .collect();
        let mut args = Vec::with_capacity(8 + plans.len() * 12 + batch.decisions.len() * 2);
        args.push(now);
        args.push(Value::from(token));
        args.push(Value::from(plans.len() as i64));
        for plan in &plans {
            encode_plan(plan, &mut args);
        }
        let mut keys = Vec::new();
        args.push(Value::from(settlements.len() as i64));
        for (plan, kind, s, limits) in settlements {
            args.extend([
                Value::from(plan),
                Value::from(kind),
                Value::from(s.member.as_str()),
                Value::from(s.at as i64),
                Value::from(s.cost as i64),
                Value::from(limits.len() as i64),
            ]);
            args.extend(limits.iter().map(|&i| Value::from(i as i64 + 1)));
            keys.extend(s.keys.iter().cloned());
        }
        args.push(Value::from(batch.decisions.len() as i64));
        for (d, plan) in batch.decisions.iter().zip(decide_plans) {
            args.push(Value::from(plan));
            args.push(Value::from(d.cost));
            keys.extend(d.keys.iter().cloned());
        }
        (keys, args)
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

/// The 1-based index of `set` among the call's plans, adding it when new.
fn plan_index<'a>(plans: &mut Vec<&'a Arc<LimitSet>>, set: &'a Arc<LimitSet>) -> i64 {
    match plans.iter().position(|q| Arc::ptr_eq(q, set)) {
        Some(i) => i as i64 + 1,
        None => {
            plans.push(set);
            plans.len() as i64
        }
    }
}

/// One plan's arguments: block settings, key slots, states, limits.
fn encode_plan(plan: &LimitSet, args: &mut Vec<Value>) {
    let block = plan.block.unwrap_or(crate::store::BlockSpec {
        block_ms: 0,
        growth: 1.0,
        max_ms: 0,
        forget_ms: 0,
    });
    args.extend([
        Value::from(block.block_ms as i64),
        Value::from(block.growth.to_string()),
        Value::from(block.max_ms as i64),
        Value::from(block.forget_ms as i64),
        Value::from(plan.slots as i64),
        Value::from(plan.states.len() as i64),
    ]);
    for s in &plan.states {
        args.push(Value::from(s.algorithm.code() as i64));
        args.push(Value::from(s.slot as i64 + 1));
    }
    args.push(Value::from(plan.limits.len() as i64));
    for l in &plan.limits {
        args.push(Value::from(l.state as i64 + 1));
        args.push(Value::from(l.name.as_str()));
        args.push(Value::from(l.limit as i64));
        args.push(Value::from(l.window_us as i64));
        args.push(Value::from(l.param as i64));
    }
}

/// A prefix unique to this process (eight base-62 characters, about 2^47 values), so members
/// written by different gateways never collide.
fn instance_id() -> String {
    let pid = std::process::id() as u64;
    let random = std::collections::hash_map::RandomState::new();
    let mut mixed = std::hash::BuildHasher::hash_one(&random, (local_now_us(), pid));
    let mut id = String::with_capacity(8);
    for _ in 0..8 {
        id.push(BASE62[(mixed % 62) as usize] as char);
        mixed /= 62;
    }
    id
}

const BASE62: &[u8; 62] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

/// The token of one call: the instance id, the call's sequence number in base 62, and a `.`
/// before the decision index the script appends (members stay short: Redis keeps one per unit).
fn call_token(instance: &str, mut sequence: u64) -> String {
    let mut digits = Vec::with_capacity(11);
    loop {
        digits.push(BASE62[(sequence % 62) as usize]);
        sequence /= 62;
        if sequence == 0 {
            break;
        }
    }
    let mut token = String::with_capacity(instance.len() + digits.len() + 1);
    token.push_str(instance);
    token.extend(digits.iter().rev().map(|&b| b as char));
    token.push('.');
    token
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_tokens_are_short_and_distinct() {
        let id = instance_id();
        assert_eq!(id.len(), 8);
        assert_eq!(call_token("abcdefgh", 0), "abcdefgh0.");
        assert_eq!(call_token("abcdefgh", 61), "abcdefghZ.");
        assert_eq!(call_token("abcdefgh", 62), "abcdefgh10.");
        let tokens: std::collections::HashSet<String> =
            (0..10_000).map(|s| call_token(&id, s)).collect();
        assert_eq!(tokens.len(), 10_000);
    }
}

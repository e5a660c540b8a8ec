//! Coalesced decisions: every decision for one Redis node (and one script) goes through a
//! [`Lane`], whose driver task sends whatever is queued as one script call (`lua/decide.lua`
//! decides them all at one instant, in arrival order) and hands each waiting request its part of
//! the reply.
//!
//! Differences from a fixed batching window: nothing ever waits for company. A lane keeps
//! [`MAX_IN_FLIGHT`] call outstanding; a decision that finds the lane free is sent at once, alone
//! if need be, and decisions only queue while a call is out, so the batches grow with the load
//! and a lone request pays one round trip, as without coalescing. (Measured here: one call out
//! per lane gives larger batches and less CPU per decision, in the gateway and in Redis, than
//! two, for more throughput on both the hot-key and the many-keys load.) A batch's decisions
//! (`/v1/decisions`) are the exception: they fill whole calls whatever the timing, so a second
//! full call of them may go out while one is in flight ([`MAX_BATCH_IN_FLIGHT`]), and Redis
//! starts on it as soon as it finishes the first instead of idling for a round trip. Single
//! decisions (the proxy path) go ahead of a batch's, so a request waits at most for the calls in
//! flight, never for a whole batch.
//!
//! In a cluster a lane serves one primary node and its calls use the `allow-cross-slot-keys`
//! script (Redis 7). When such a call fails for a reason other than the connection (a MOVED or
//! ASK during resharding, a server without script flags), its decisions are sent again one call
//! per slot, routed by their own keys, so the client library follows the redirections.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::error::Error as FredError;
use fred::interfaces::{ClientLike, LuaInterface};
use fred::types::cluster::ClusterRouting;
use fred::types::config::{Options, Server};
use fred::types::{ClusterHash, CustomCommand, Key, Value};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, oneshot};

use super::deadline::Deadline;
use super::script::{Script, ScriptKind, Scripts};
use super::{is_noscript, map_error};
use crate::config::ClockSource;
use crate::store::{local_now_us, LimitSet, StoreError};

/// Calls a lane keeps outstanding at once; decisions queue only while it is busy.
pub const MAX_IN_FLIGHT: usize = 1;
/// Calls outstanding at once when the extra ones are full calls of a batch's decisions.
pub const MAX_BATCH_IN_FLIGHT: usize = 2;
/// Most decisions one call carries (a 10,000-key batch becomes a few dozen pipelined calls,
/// none of which holds Redis for long).
pub const MAX_PER_CALL: usize = 256;

/// One decision waiting for its call.
pub struct Pending {
    /// The key's effective limits (calls list each distinct set once).
    pub limits: Arc<LimitSet>,
    /// The decision's keys: one per limit, then the block marker when it blocks.
    pub keys: Vec<Key>,
    /// Units to spend.
    pub cost: u64,
    /// An explicit instant (tests, replays), or `None` for the configured clock.
    pub fixed_now: Option<u64>,
    /// When the request stops waiting and its route's `on_error` applies.
    pub deadline: Deadline,
    /// Where its answer goes.
    pub reply: oneshot::Sender<Result<Answer, StoreError>>,
}

/// A decision's part of a reply and the instant the script decided at.
pub struct Answer {
    /// `code, retry_us, used_i, reset_us_i, retry_us_i ...`
    pub values: Vec<i64>,
    /// The script's `now`, microseconds since the epoch.
    pub decided_at_us: u64,
}

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

enum Job {
    One(Pending),
    Many(Vec<Pending>),
}

/// The queue of one (node, script); its driver task runs until the store is dropped.
#[derive(Clone)]
pub struct Lane {
    jobs: mpsc::UnboundedSender<Job>,
}

impl Lane {
    /// Whether two handles feed the same driver.
    pub fn same(&self, other: &Lane) -> bool {
        self.jobs.same_channel(&other.jobs)
    }

    /// Starts the driver of a lane for `target` and the `kind` script.
    pub fn start(caller: Arc<Caller>, target: Target, kind: ScriptKind) -> Lane {
        let (jobs, queue) = mpsc::unbounded_channel();
        tokio::spawn(drive(caller, target, kind, queue));
        Lane { jobs }
    }

    /// Queues one decision.
    pub fn submit(&self, pending: Pending) {
        if let Err(e) = self.jobs.send(Job::One(pending)) {
            fail(
                job_pendings(e.0),
                StoreError::Other("decision lane stopped".into()),
            );
        }
    }

    /// Queues many decisions at once, in order.
    pub fn submit_many(&self, pendings: Vec<Pending>) {
        if let Err(e) = self.jobs.send(Job::Many(pendings)) {
            fail(
                job_pendings(e.0),
                StoreError::Other("decision lane stopped".into()),
            );
        }
    }
}

fn job_pendings(job: Job) -> Vec<Pending> {
    match job {
        Job::One(p) => vec![p],
        Job::Many(v) => v,
    }
}

fn fail(pendings: Vec<Pending>, error: StoreError) {
    for p in pendings {
        let _ = p.reply.send(Err(error.clone()));
    }
}

/// The driver: takes what is queued and sends it while [`Queue::may_send`] allows.
async fn drive(
    caller: Arc<Caller>,
    target: Target,
    kind: ScriptKind,
    mut jobs: mpsc::UnboundedReceiver<Job>,
) {
    let mut queue = Queue::default();
    let mut in_flight = FuturesUnordered::new();
    let mut open = true;
    loop {
        while let Ok(job) = jobs.try_recv() {
            queue.push(job);
        }
        while queue.may_send(in_flight.len()) {
            let batch = queue.next_call();
            if batch.is_empty() {
                break;
            }
            let caller = caller.clone();
            let target = target.clone();
            in_flight.push(async move { caller.call(&target, kind, batch).await });
        }
        if !open && in_flight.is_empty() && queue.is_empty() {
            return;
        }
        tokio::select! {
            biased;
            Some(()) = in_flight.next(), if !in_flight.is_empty() => {}
            job = jobs.recv(), if open => match job {
                Some(job) => queue.push(job),
                None => open = false,
            },
        }
    }
}

/// The decisions waiting for a call: single ones (a request on the proxy path) go ahead of
/// batches (`/v1/decisions`), so a request never waits behind the thousands of decisions of a
/// batch queued before it, only for a call in flight. Each kind keeps its arrival order, and a
/// batch's decisions stay in its order.
#[derive(Default)]
struct Queue {
    single: VecDeque<Pending>,
    batches: VecDeque<Pending>,
}

impl Queue {
    fn push(&mut self, job: Job) {
        match job {
            Job::One(p) => self.single.push_back(p),
            Job::Many(v) => self.batches.extend(v),
        }
    }

    /// Whether another call may go out with `in_flight` calls outstanding: the first always; a
    /// second only when nothing but a batch's decisions waits and they fill a whole call.
    fn may_send(&self, in_flight: usize) -> bool {
        if self.is_empty() {
            return false;
        }
        in_flight < MAX_IN_FLIGHT
            || (in_flight < MAX_BATCH_IN_FLIGHT
                && self.single.is_empty()
                && self.batches.len() >= MAX_PER_CALL)
    }

    fn is_empty(&self) -> bool {
        self.single.is_empty() && self.batches.is_empty()
    }

    /// The next call's decisions: up to [`MAX_PER_CALL`] sharing one explicit instant (or
    /// none), single ones first. Decisions whose deadline already passed are answered with a
    /// timeout instead.
    fn next_call(&mut self) -> Vec<Pending> {
        let mut batch = Vec::new();
        take_into(&mut batch, &mut self.single);
        take_into(&mut batch, &mut self.batches);
        batch
    }
}

/// Moves decisions from the front of `queue` into `batch` while they fit in it.
fn take_into(batch: &mut Vec<Pending>, queue: &mut VecDeque<Pending>) {
    while let Some(p) = queue.front() {
        if batch.len() == MAX_PER_CALL
            || batch
                .first()
                .is_some_and(|f: &Pending| f.fixed_now != p.fixed_now)
        {
            break;
        }
        let p = queue.pop_front().expect("front exists");
        if p.deadline.passed() {
            let error = p.deadline.timeout();
            let _ = p.reply.send(Err(error));
            continue;
        }
        batch.push(p);
    }
}

/// What every lane shares: the client, the scripts, the clock, the call tokens.
pub struct Caller {
    client: Client,
    clock: ClockSource,
    /// Every script, by [`ScriptKind`].
    scripts: [Scripts; 3],
    instance: String,
    sequence: AtomicU64,
    /// `store.timeout`: the most one call may take once sent.
    timeout: Duration,
    /// Whether the cross-slot scripts loaded (Redis 7); if not, cluster calls go per slot.
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
            scripts: ScriptKind::ALL.map(Scripts::of),
            instance: instance_id(),
            sequence: AtomicU64::new(0),
            timeout,
            cross_slot,
            on_error,
        }
    }

    /// Both forms of the `kind` script.
    pub fn scripts(&self, kind: ScriptKind) -> &Scripts {
        &self.scripts[kind as usize]
    }

    /// Loads every script on every node; a cross-slot script that does not load (Redis < 7)
    /// turns cross-slot calls off.
    pub async fn load_scripts(&self) -> Result<(), StoreError> {
        for kind in ScriptKind::ALL {
            let scripts = self.scripts(kind);
            self.load(&scripts.plain).await?;
            if self.client.is_clustered() && self.cross_slot.load(Ordering::Relaxed) {
                if let Err(e) = self.load(&scripts.cross_slot).await {
                    tracing::warn!(error = %e, "Redis refused the cross-slot script (needs Redis 7); cluster decisions go one call per slot");
                    self.cross_slot.store(false, Ordering::Relaxed);
                }
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

    /// Runs one call for `batch` and answers every decision in it.
    async fn call(&self, target: &Target, kind: ScriptKind, batch: Vec<Pending>) {
        let deadline = batch
            .iter()
            .map(|p| p.deadline)
            .min()
            .expect("a call has decisions");
        let result = match target {
            Target::Node(_) if self.cross_slot() => {
                match self
                    .bounded(deadline)
                    .run(self.attempt(target, kind, &batch))
                    .await
                {
                    Err(StoreError::Script(why)) => {
                        tracing::debug!(%why, "cross-slot call refused; deciding per slot");
                        return self.call_per_slot(kind, batch, deadline).await;
                    }
                    other => other,
                }
            }
            Target::Node(_) | Target::PerSlot => {
                return self.call_per_slot(kind, batch, deadline).await
            }
            Target::ByKey => {
                self.bounded(deadline)
                    .run(self.attempt(target, kind, &batch))
                    .await
            }
        };
        self.answer(batch, result);
    }

    /// The deadline of an attempt sent now: its decisions' own, and at most `store.timeout`
    /// from now. A batch's deadline covers all of its calls (`store.timeout` per call), but one
    /// call that gets no answer (Redis died with it in flight) must not hold one of the lane's
    /// slots, and every decision queued behind it, for the whole batch's budget.
    fn bounded(&self, deadline: Deadline) -> Deadline {
        deadline.min(Deadline::after(self.timeout))
    }

    /// The cluster fallback: one call per slot, routed by the client library. These calls run
    /// at once and may each load a flushed script again, so together they keep the decisions'
    /// own deadline.
    async fn call_per_slot(&self, kind: ScriptKind, batch: Vec<Pending>, deadline: Deadline) {
        let mut by_slot: HashMap<u16, Vec<Pending>> = HashMap::new();
        for p in batch {
            let slot = p
                .keys
                .first()
                .map_or(0, |k| ClusterRouting::hash_key(k.as_bytes()));
            by_slot.entry(slot).or_default().push(p);
        }
        let calls = by_slot.into_values().map(|group| async move {
            let result = deadline
                .run(self.attempt(&Target::ByKey, kind, &group))
                .await;
            self.answer(group, result);
        });
        futures_util::future::join_all(calls).await;
    }

    /// Sends the call (loading the script again once on `NOSCRIPT`) and returns the reply.
    async fn attempt(
        &self,
        target: &Target,
        kind: ScriptKind,
        batch: &[Pending],
    ) -> Result<Vec<i64>, StoreError> {
        let scripts = self.scripts(kind);
        let script = match target {
            Target::Node(_) => &scripts.cross_slot,
            Target::ByKey | Target::PerSlot => &scripts.plain,
        };
        let (keys, args) = self.encode(batch);
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
    fn encode(&self, batch: &[Pending]) -> (Vec<Key>, Vec<Value>) {
        let now = match (batch[0].fixed_now, self.clock) {
            (Some(now), _) => Value::from(now as i64),
            (None, ClockSource::Local) => Value::from(local_now_us() as i64),
            (None, ClockSource::Redis) => Value::from(""),
        };
        let sequence = self.sequence.fetch_add(1, Ordering::Relaxed);
        let token = call_token(&self.instance, sequence);
        let mut plans: Vec<&Arc<LimitSet>> = Vec::new();
        let mut plan_of = Vec::with_capacity(batch.len());
        for p in batch {
            let index = match plans.iter().position(|q| Arc::ptr_eq(q, &p.limits)) {
                Some(i) => i,
                None => {
                    plans.push(&p.limits);
                    plans.len() - 1
                }
            };
            plan_of.push(index + 1);
        }
        let mut args = Vec::with_capacity(4 + plans.len() * 4 + batch.len() * 2);
        args.push(now);
        args.push(Value::from(token));
        args.push(Value::from(plans.len() as i64));
        for plan in &plans {
            args.push(Value::from(plan.block_ms as i64));
            args.push(Value::from(plan.limits.len() as i64));
            for l in &plan.limits {
                args.push(Value::from(l.name.as_str()));
                args.push(Value::from(l.limit as i64));
                args.push(Value::from(l.window_us as i64));
            }
        }
        args.push(Value::from(batch.len() as i64));
        let mut keys = Vec::with_capacity(batch.iter().map(|p| p.keys.len()).sum());
        for (p, plan) in batch.iter().zip(plan_of) {
            args.push(Value::from(plan as i64));
            args.push(Value::from(p.cost as i64));
            keys.extend(p.keys.iter().cloned());
        }
        (keys, args)
    }

    /// Hands each decision its part of the reply (or the call's error, counted once).
    fn answer(&self, batch: Vec<Pending>, result: Result<Vec<i64>, StoreError>) {
        let reply = match result {
            Ok(reply) => reply,
            Err(e) => {
                (self.on_error)(&e);
                return fail(batch, e);
            }
        };
        let Some((&now, mut rest)) = reply.split_first() else {
            let e = StoreError::Script("empty reply".into());
            (self.on_error)(&e);
            return fail(batch, e);
        };
        for p in batch {
            let len = crate::store::Decision::reply_len(&p.limits);
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
            }));
        }
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

    fn pending() -> Pending {
        Pending {
            limits: Arc::new(LimitSet {
                block_ms: 0,
                limits: Vec::new(),
            }),
            keys: Vec::new(),
            cost: 1,
            fixed_now: None,
            deadline: Deadline::after(Duration::from_secs(60)),
            reply: oneshot::channel().0,
        }
    }

    #[test]
    fn a_second_call_goes_out_only_for_a_whole_call_of_batch_decisions() {
        let mut queue = Queue::default();
        assert!(!queue.may_send(0), "nothing queued, nothing to send");
        queue.push(Job::One(pending()));
        assert!(queue.may_send(0), "a lone request is sent at once");
        assert!(!queue.may_send(1), "a request waits for the call in flight");

        let mut queue = Queue::default();
        queue.push(Job::Many(
            (0..MAX_PER_CALL + 10).map(|_| pending()).collect(),
        ));
        assert!(
            queue.may_send(1),
            "a whole call of a batch goes out beside the one in flight"
        );
        assert!(!queue.may_send(MAX_BATCH_IN_FLIGHT));
        assert_eq!(queue.next_call().len(), MAX_PER_CALL);
        assert!(queue.may_send(0));
        assert!(!queue.may_send(1), "a batch's tail waits to fill a call");

        let mut queue = Queue::default();
        queue.push(Job::Many((0..MAX_PER_CALL).map(|_| pending()).collect()));
        queue.push(Job::One(pending()));
        assert!(
            !queue.may_send(1),
            "a waiting request keeps the lane to one call"
        );
    }

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

//! The Redis store: one `EVALSHA` of the route's script per decision (one round trip), bounded by
//! `store.timeout`. Scripts are loaded with `SCRIPT LOAD` at start; a `NOSCRIPT` reply (restart,
//! failover, `SCRIPT FLUSH`) loads the script again and retries within the same deadline, so the
//! client never sees it. Commands fail fast while disconnected instead of queueing, so a dead
//! Redis costs a request at most `store.timeout`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::{Client, WithOptions};
use fred::error::{Error as FredError, ErrorKind};
use fred::interfaces::{ClientLike, EventInterface, KeysInterface, LuaInterface, PubsubInterface};
use fred::types::config::{Config as FredConfig, ConnectionConfig, Options, ReconnectPolicy};
use fred::types::{Builder, ClusterHash, CustomCommand, Value};

use super::{local_now_us, window_us, Decision, DecisionInput, StoreError};
use crate::config::{Algorithm, ClockSource, RouteConfig, StoreConfig};

/// The sliding-log script, embedded at build time from `lua/`.
pub const SLIDING_LOG_LUA: &str = include_str!("../../lua/sliding_log.lua");
/// The sliding-window-counter script, embedded at build time from `lua/`.
pub const SLIDING_WINDOW_COUNTER_LUA: &str = include_str!("../../lua/sliding_window_counter.lua");

/// A script and its SHA-1, computed locally so `EVALSHA` never waits for a load.
struct Script {
    lua: &'static str,
    sha: String,
}

impl Script {
    fn new(lua: &'static str) -> Script {
        Script {
            lua,
            sha: fred::util::sha1_hash(lua),
        }
    }
}

/// Redis-backed limiter; clones share the connection.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    builder: Builder,
    client: Client,
    fast: WithOptions<Client>,
    timeout: Duration,
    clock: ClockSource,
    sliding_log: Script,
    sliding_window_counter: Script,
    instance: String,
    sequence: AtomicU64,
}

impl RedisStore {
    /// Connects to `config.url` in the background; returns at once even if Redis is down (the
    /// client keeps reconnecting, and decisions fail fast meanwhile).
    pub async fn connect(config: &StoreConfig) -> Result<RedisStore, StoreError> {
        let fred_config = FredConfig {
            fail_fast: false,
            ..FredConfig::from_url(&fred_url(&config.url))
                .map_err(|e| StoreError::Other(format!("store.url: {e}")))?
        };
        let mut builder = Builder::from_config(fred_config);
        builder
            .with_connection_config(|c: &mut ConnectionConfig| {
                c.connection_timeout = Duration::from_secs(1);
                c.internal_command_timeout = Duration::from_secs(1);
            })
            .set_policy(ReconnectPolicy::new_exponential(0, 50, 1000, 2));
        let client = builder
            .build()
            .map_err(|e| StoreError::Other(e.to_string()))?;
        client.connect();
        let fast = client.with_options(&Options {
            fail_fast: true,
            max_attempts: Some(1),
            timeout: Some(config.timeout),
            ..Default::default()
        });
        let store = RedisStore {
            inner: Arc::new(Inner {
                builder,
                client,
                fast,
                timeout: config.timeout,
                clock: config.clock,
                sliding_log: Script::new(SLIDING_LOG_LUA),
                sliding_window_counter: Script::new(SLIDING_WINDOW_COUNTER_LUA),
                instance: instance_id(),
                sequence: AtomicU64::new(0),
            }),
        };
        Ok(store)
    }

    /// Waits up to `wait` for the first connection and loads the scripts.
    pub async fn wait_until_ready(&self, wait: Duration) -> Result<(), StoreError> {
        tokio::time::timeout(wait, self.inner.client.wait_for_connect())
            .await
            .map_err(|_| StoreError::Timeout(wait))?
            .map_err(map_error)?;
        for s in [&self.inner.sliding_log, &self.inner.sliding_window_counter] {
            self.load(s).await?;
        }
        Ok(())
    }

    /// The underlying client (for pub/sub wiring and tests).
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    async fn load(&self, script: &Script) -> Result<(), StoreError> {
        let _: Value = self
            .inner
            .client
            .script_load_cluster(script.lua)
            .await
            .map_err(map_error)?;
        Ok(())
    }

    fn script(&self, algorithm: Algorithm) -> &Script {
        match algorithm {
            Algorithm::SlidingLog => &self.inner.sliding_log,
            Algorithm::SlidingWindowCounter => &self.inner.sliding_window_counter,
        }
    }

    /// ARGV for one decision, in the layout the scripts document.
    fn args(&self, input: &DecisionInput<'_>) -> Vec<Value> {
        let now = match (input.now_us, self.inner.clock) {
            (Some(now), _) => Value::from(now as i64),
            (None, ClockSource::Local) => Value::from(local_now_us() as i64),
            (None, ClockSource::Redis) => Value::from(""),
        };
        let seq = self.inner.sequence.fetch_add(1, Ordering::Relaxed);
        let mut args = Vec::with_capacity(4 + 2 * input.route.limits.len());
        args.push(now);
        args.push(Value::from(input.cost as i64));
        args.push(Value::from(input.block_ms() as i64));
        args.push(Value::from(format!("{}{:x}", self.inner.instance, seq)));
        for l in &input.route.limits {
            args.push(Value::from(l.limit as i64));
            args.push(Value::from(window_us(l) as i64));
        }
        args
    }

    /// Decides one request with one `EVALSHA` (two more commands only after a `NOSCRIPT`).
    pub async fn decide(&self, input: DecisionInput<'_>) -> Result<Decision, StoreError> {
        let script = self.script(input.route.algorithm);
        let call = async {
            let reply = match self.evalsha(script, input.keys(), self.args(&input)).await {
                // Keys and arguments are rebuilt rather than cloned up front: this is rare.
                Err(e) if is_noscript(&e) => {
                    self.load(script).await?;
                    self.evalsha(script, input.keys(), self.args(&input))
                        .await
                        .map_err(map_error)?
                }
                other => other.map_err(map_error)?,
            };
            Decision::from_reply(&input.route.limits, &reply)
        };
        tokio::time::timeout(self.inner.timeout, call)
            .await
            .unwrap_or(Err(StoreError::Timeout(self.inner.timeout)))
    }

    async fn evalsha(
        &self,
        script: &Script,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<Vec<i64>, FredError> {
        self.inner
            .fast
            .evalsha(script.sha.as_str(), keys, args)
            .await
    }

    /// Decides many keys of one route, pipelined (fred sends each command to its cluster node).
    pub async fn decide_batch(
        &self,
        route: &RouteConfig,
        bases: &[String],
        cost: u64,
        now_us: Option<u64>,
    ) -> Vec<Result<Decision, StoreError>> {
        let script = self.script(route.algorithm);
        let calls: Vec<(Vec<String>, Vec<Value>)> = bases
            .iter()
            .map(|base| {
                let input = DecisionInput {
                    route,
                    base,
                    cost,
                    now_us,
                };
                (input.keys(), self.args(&input))
            })
            .collect();
        // A pipeline of n scripts costs Redis n script runs: allow the per-decision timeout
        // plus 200 µs a key (10,000 keys: about 2 s), so a big batch is not cut off as a whole.
        let deadline = self.inner.timeout * 4 + Duration::from_micros(200) * bases.len() as u32;
        let run = async {
            let mut results = self.pipeline(script, &calls).await;
            if results
                .iter()
                .any(|r| matches!(r, Err(e) if is_noscript(e)))
            {
                if let Err(e) = self.load(script).await {
                    return vec![Err(e); calls.len()];
                }
                results = self.pipeline(script, &calls).await;
            }
            results
                .into_iter()
                .map(|r| {
                    r.map_err(map_error)
                        .and_then(|reply| Decision::from_reply(&route.limits, &reply))
                })
                .collect::<Vec<_>>()
        };
        match tokio::time::timeout(deadline, run).await {
            Ok(results) => results,
            Err(_) => vec![Err(StoreError::Timeout(deadline)); bases.len()],
        }
    }

    async fn pipeline(
        &self,
        script: &Script,
        calls: &[(Vec<String>, Vec<Value>)],
    ) -> Vec<Result<Vec<i64>, FredError>> {
        // Pipelines have no EVALSHA method; send it as a custom command routed by its first key.
        let evalsha = CustomCommand::new_static("EVALSHA", ClusterHash::Offset(2), false);
        let pipe = self.inner.client.pipeline();
        for (keys, args) in calls {
            let mut argv: Vec<Value> = Vec::with_capacity(2 + keys.len() + args.len());
            argv.push(Value::from(script.sha.as_str()));
            argv.push(Value::from(keys.len() as i64));
            argv.extend(keys.iter().map(|k| Value::from(k.as_str())));
            argv.extend(args.iter().cloned());
            let queued: Result<(), FredError> = pipe.custom(evalsha.clone(), argv).await;
            if let Err(e) = queued {
                return vec![Err(e); calls.len()];
            }
        }
        pipe.try_all::<Vec<i64>>().await
    }

    /// Deletes keys (an admin reset), one `DEL` per key since they share a slot anyway.
    pub async fn delete(&self, keys: Vec<String>) -> Result<(), StoreError> {
        let call = async {
            let _: i64 = self.inner.fast.del(keys).await.map_err(map_error)?;
            Ok(())
        };
        tokio::time::timeout(self.inner.timeout * 4, call)
            .await
            .unwrap_or(Err(StoreError::Timeout(self.inner.timeout * 4)))
    }

    /// `PING` within the store timeout.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let call = async {
            let _: String = self.inner.fast.ping(None).await.map_err(map_error)?;
            Ok(())
        };
        let wait = self.inner.timeout.max(Duration::from_millis(200));
        tokio::time::timeout(wait, call)
            .await
            .unwrap_or(Err(StoreError::Timeout(wait)))
    }
}

impl RedisStore {
    /// Tells every instance (through Redis pub/sub on `channel`) to forget `base` in its deny cache.
    pub async fn publish_reset(&self, channel: &str, base: &str) -> Result<(), StoreError> {
        let call = async {
            let _: i64 = self
                .inner
                .fast
                .publish(channel, base)
                .await
                .map_err(map_error)?;
            Ok(())
        };
        tokio::time::timeout(self.inner.timeout * 4, call)
            .await
            .unwrap_or(Err(StoreError::Timeout(self.inner.timeout * 4)))
    }

    /// Calls `on_reset(base)` for every reset published on `channel`, on a connection of its
    /// own that resubscribes after reconnects. The receiver fires once the subscription holds.
    pub fn subscribe_resets<F>(
        &self,
        channel: String,
        on_reset: F,
    ) -> Result<
        (
            tokio::task::JoinHandle<()>,
            tokio::sync::oneshot::Receiver<()>,
        ),
        StoreError,
    >
    where
        F: Fn(String) + Send + 'static,
    {
        let subscriber = self
            .inner
            .builder
            .build_subscriber_client()
            .map_err(|e| StoreError::Other(e.to_string()))?;
        let (subscribed_tx, subscribed_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut messages = subscriber.message_rx();
            subscriber.connect();
            let _resubscribe = subscriber.manage_subscriptions();
            loop {
                let subscribed = match subscriber.wait_for_connect().await {
                    Ok(()) => subscriber.subscribe(channel.as_str()).await,
                    Err(e) => Err(e),
                };
                match subscribed {
                    Ok(()) => break,
                    Err(e) => tracing::debug!(error = %e, "reset subscription failed; retrying"),
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let _ = subscribed_tx.send(());
            while let Ok(message) = messages.recv().await {
                if let Some(base) = message.value.as_string() {
                    on_reset(base);
                }
            }
        });
        Ok((task, subscribed_rx))
    }
}

fn is_noscript(e: &FredError) -> bool {
    e.details().starts_with("NOSCRIPT")
}

/// Sorts a fred error into the `kind` label of `slidegate_store_errors_total`.
fn map_error(e: FredError) -> StoreError {
    let details = e.details();
    if details.starts_with("NOSCRIPT")
        || details.starts_with("ERR")
        || details.starts_with("WRONGTYPE")
    {
        return StoreError::Script(e.to_string());
    }
    match e.kind() {
        ErrorKind::Timeout => StoreError::Timeout(Duration::ZERO),
        ErrorKind::IO
        | ErrorKind::Canceled
        | ErrorKind::Backpressure
        | ErrorKind::Routing
        | ErrorKind::Cluster
        | ErrorKind::Sentinel
        | ErrorKind::Tls
        | ErrorKind::Auth => StoreError::Connection(e.to_string()),
        ErrorKind::Parse
        | ErrorKind::Protocol
        | ErrorKind::InvalidArgument
        | ErrorKind::InvalidCommand => StoreError::Script(e.to_string()),
        _ => StoreError::Other(e.to_string()),
    }
}

/// Rewrites the spec's multi-host URLs into fred's form:
/// `redis-cluster://h1:p1,h2:p2` -> `redis-cluster://h1:p1?node=h2:p2`, and
/// `redis-sentinel://h1:p1,h2:p2/name` -> `redis-sentinel://h1:p1?node=h2:p2&sentinelServiceName=name`.
pub fn fred_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match rest.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (rest, None),
    };
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let mut hosts = hosts.split(',').filter(|h| !h.is_empty());
    let first = hosts.next().unwrap_or("127.0.0.1:6379");
    let mut params: Vec<String> = hosts.map(|h| format!("node={h}")).collect();
    let sentinel = scheme.ends_with("-sentinel");
    let mut path_part = String::new();
    match path {
        Some(p) if sentinel && !p.is_empty() && p.parse::<u32>().is_err() => {
            params.push(format!("sentinelServiceName={p}"));
        }
        Some(p) if !p.is_empty() => path_part = format!("/{p}"),
        _ => {}
    }
    if let Some(q) = query {
        params.push(q.to_string());
    }
    let user = userinfo.map_or(String::new(), |u| format!("{u}@"));
    let query = if params.is_empty() {
        String::new()
    } else {
        format!("?{}", params.join("&"))
    };
    format!("{scheme}://{user}{first}{path_part}{query}")
}

/// A prefix unique to this process, so members written by different gateways never collide.
fn instance_id() -> String {
    let nanos = local_now_us();
    let pid = std::process::id() as u64;
    let random = std::collections::hash_map::RandomState::new();
    let mixed = std::hash::BuildHasher::hash_one(&random, (nanos, pid));
    format!("{mixed:016x}-")
}

#[cfg(test)]
mod tests {
    use super::fred_url;

    #[test]
    fn multi_host_urls_become_node_params() {
        assert_eq!(fred_url("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(
            fred_url("redis-cluster://127.0.0.1:7000,127.0.0.1:7001"),
            "redis-cluster://127.0.0.1:7000?node=127.0.0.1:7001"
        );
        assert_eq!(
            fred_url("redis-sentinel://:pw@10.0.0.1:26379,10.0.0.2:26379/mymaster"),
            "redis-sentinel://:pw@10.0.0.1:26379?node=10.0.0.2:26379&sentinelServiceName=mymaster"
        );
    }
}

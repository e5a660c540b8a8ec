//! Operations besides decisions: deleting a key's state (an admin reset), `PING` for `/readyz`,
//! the refusal index, block markers and dry runs of `/admin/blocked`, and the pub/sub channel that
//! carries resets to every instance's deny cache. Each runs under a [`Deadline`] of its own:
//! four times `store.timeout`, at least 200 ms, and goes to the node of its key as decisions do
//! ([`super::send`]), redirections followed.

use std::time::Duration;

use fred::interfaces::ClientLike;
use fred::types::{ClusterHash, CustomCommand, FromValue, Value};

use super::fred_error::map_error;
use super::send::{send, OnTryAgain, Route};
use super::slots::slot_of;
use super::{Deadline, RedisStore};
use crate::store::refused::{instants_of, Recorded, Refused, MAX_REFUSED};
use crate::store::{Decision, DecisionRequest, Marker, StoreError};

impl RedisStore {
    fn admin_deadline(&self) -> Deadline {
        Deadline::after(self.admin_timeout())
    }

    /// How long an operation besides decisions may take: four times `store.timeout`, at least
    /// 200 ms.
    pub(super) fn admin_timeout(&self) -> Duration {
        (self.inner.timeout * 4).max(Duration::from_millis(200))
    }

    /// Dry runs for the admin listener, asked again while some time out, within an admin
    /// operation's time (four times `store.timeout`, at least 200 ms): an operator's listing of
    /// who is refused is not a request waiting, but each call still keeps a decision's bound,
    /// so no decision queued behind it waits longer.
    pub async fn dry_runs_for_admin(
        &self,
        requests: &[DecisionRequest<'_>],
    ) -> Vec<Result<Decision, StoreError>> {
        debug_assert!(
            requests.iter().all(|r| r.dry_run),
            "asked again: dry runs only"
        );
        let deadline = Deadline::after(self.admin_timeout());
        let mut results = self.decide_many(requests, None).await;
        // at most as many more as calls of `store.timeout` fit in the admin's time
        for _ in 1..(self.admin_timeout().as_micros() / self.inner.timeout.as_micros().max(1)) {
            let timed_out =
                (0..results.len()).filter(|&i| matches!(results[i], Err(StoreError::Timeout(_))));
            let again: Vec<usize> = timed_out.collect();
            if again.is_empty() || deadline.passed() {
                break;
            }
            // only those that timed out are asked again
            let asked: Vec<DecisionRequest<'_>> = again.iter().map(|&i| requests[i]).collect();
            for (i, result) in again.into_iter().zip(self.decide_many(&asked, None).await) {
                results[i] = result;
            }
        }
        results
    }

    /// Runs `name` with `args` on the node serving `key` (the one server outside a cluster).
    async fn command<R: FromValue>(
        &self,
        name: &'static str,
        key: &str,
        args: Vec<Value>,
    ) -> Result<R, StoreError> {
        let command = CustomCommand::new_static(name, ClusterHash::FirstKey, false);
        let route = Route::Slot(slot_of(key.as_bytes()));
        let nodes = &self.connection().nodes;
        let sent = Box::pin(send(
            nodes,
            route,
            (command, args),
            None,
            OnTryAgain::SendAgain,
        ))
        .await;
        sent.reply.and_then(|v| v.convert()).map_err(map_error)
    }

    /// Deletes `keys`, one `DEL` per key (in a cluster they may live on several nodes);
    /// answers how many existed.
    pub async fn delete(&self, keys: &[String]) -> Result<usize, StoreError> {
        self.admin_deadline()
            .run(async {
                let mut deleted = 0;
                for key in keys {
                    let n: i64 = self.command("DEL", key, vec![key.as_str().into()]).await?;
                    deleted += n.max(0) as usize;
                }
                Ok(deleted)
            })
            .await
    }

    /// How many of `keys` exist, one `EXISTS` per key (in a cluster they may live on several
    /// nodes).
    pub async fn exists(&self, keys: &[String]) -> Result<usize, StoreError> {
        self.admin_deadline()
            .run(async {
                let mut found = 0;
                for key in keys {
                    let n: i64 = self
                        .command("EXISTS", key, vec![key.as_str().into()])
                        .await?;
                    found += n.max(0) as usize;
                }
                Ok(found)
            })
            .await
    }

    /// Whether the store answers as a master: `ROLE`, answered when some node says it is one
    /// (in a cluster, a primary: every instance sees the same cluster, so one node's outage is
    /// not a reason to take them all out of a load balancer; it shows in
    /// `slidegate_store_errors_total`). A node that answers as a replica (a standalone URL's
    /// server demoted by a failover) refuses every decision with `READONLY`, so it does not
    /// answer for this. When none does, a node that is not connected says why its last try
    /// failed (a refused password), where one did.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let why = |e: StoreError| self.node_failure().unwrap_or(e);
        self.admin_deadline()
            .run(async {
                let pings: Vec<_> = (self.connection().nodes.every_node().into_iter())
                    .map(|n| Box::pin(async move { answers_as_master(&n.client).await }))
                    .collect();
                if pings.is_empty() {
                    // a cluster whose slot table was never read: no node is known yet
                    return Err(StoreError::Connection(
                        "no node of the cluster is known yet (its slot table was never read)"
                            .into(),
                    ));
                }
                futures_util::future::select_ok(pings).await.map(drop)
            })
            .await
            .map_err(why)
    }

    /// Records refusals in the refusal index `index` as the decision code does (a cluster's
    /// gateway, after the call): `ZADD`, each instant `HSET` beside it, `ZREMRANGEBYRANK` to the
    /// latest-ending [`MAX_REFUSED`] (the trimmed members' instants dropped), and the TTL of
    /// each raised to the longest refusal's end (`PTTL`, `PEXPIRE`).
    pub async fn note_refused(&self, index: &str, entries: &[Refused]) -> Result<(), StoreError> {
        let Some(longest) = entries.iter().map(|e| e.wait_us).max() else {
            return Ok(());
        };
        let at = instants_of(index);
        self.admin_deadline()
            .run(async {
                let mut zadd = vec![Value::from(index)];
                let mut hset = vec![Value::from(at.as_str())];
                for e in entries {
                    zadd.push(Value::from(e.until_us as i64));
                    zadd.push(Value::from(e.member.as_str()));
                    hset.push(Value::from(e.member.as_str()));
                    hset.push(Value::from(e.at_us as i64));
                }
                let _: i64 = self.command("HSET", index, hset).await?;
                let _: i64 = self.command("ZADD", index, zadd).await?;
                let held: i64 = self.command("ZCARD", index, vec![index.into()]).await?;
                let over = held - MAX_REFUSED as i64;
                if over > 0 {
                    let range = vec![index.into(), 0.into(), Value::from(over - 1)];
                    let gone: Vec<String> = self.command("ZRANGE", index, range.clone()).await?;
                    let _: i64 = self.command("ZREMRANGEBYRANK", index, range).await?;
                    self.forget_instants(index, &gone).await?;
                }
                let ms = longest.div_ceil(1000) as i64;
                for key in [index, at.as_str()] {
                    let ttl: i64 = self.command("PTTL", index, vec![key.into()]).await?;
                    if ttl < ms {
                        let expire = vec![key.into(), Value::from(ms)];
                        let _: i64 = self.command("PEXPIRE", index, expire).await?;
                    }
                }
                Ok(())
            })
            .await
    }

    /// The refusals of `index` that have not ended by the clock of its node (`TIME`), latest
    /// ending first, at most `n`: each member, its end and its instant; and that clock's now
    /// (µs).
    pub async fn refused_now(
        &self,
        index: &str,
        n: usize,
    ) -> Result<(u64, Vec<Recorded>), StoreError> {
        self.admin_deadline()
            .run(async {
                let time: Vec<String> = self.command("TIME", index, vec![]).await?;
                let part = |i: usize| time.get(i).and_then(|t| t.parse::<u64>().ok());
                let now = match (part(0), part(1)) {
                    (Some(s), Some(us)) => s * 1_000_000 + us,
                    _ => return Err(StoreError::Other(format!("TIME answered {time:?}"))),
                };
                let args = vec![
                    index.into(),
                    "+inf".into(),
                    format!("({now}").into(),
                    "WITHSCORES".into(),
                    "LIMIT".into(),
                    0.into(),
                    Value::from(n as i64),
                ];
                let flat: Vec<String> = self.command("ZREVRANGEBYSCORE", index, args).await?;
                let ended: Vec<(String, u64)> = flat
                    .chunks_exact(2)
                    .filter_map(|p| Some((p[0].clone(), p[1].parse::<f64>().ok()? as u64)))
                    .collect();
                let instants = self.instants(index, &ended).await?;
                let entries = ended
                    .into_iter()
                    .zip(instants)
                    .map(|((member, until_us), at_us)| Recorded {
                        member,
                        until_us,
                        at_us,
                    })
                    .collect();
                Ok((now, entries))
            })
            .await
    }

    /// The instants of `entries` of the index `index` (0 where the index does not say).
    async fn instants(
        &self,
        index: &str,
        entries: &[(String, u64)],
    ) -> Result<Vec<u64>, StoreError> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let mut args = vec![Value::from(instants_of(index))];
        args.extend(entries.iter().map(|(m, _)| Value::from(m.as_str())));
        let read: Vec<Option<String>> = self.command("HMGET", index, args).await?;
        Ok(read
            .into_iter()
            .map(|at| at.and_then(|t| t.parse().ok()).unwrap_or(0))
            .collect())
    }

    /// Drops the instants of `members` of the index `index`.
    async fn forget_instants(&self, index: &str, members: &[String]) -> Result<(), StoreError> {
        if members.is_empty() {
            return Ok(());
        }
        let mut args = vec![Value::from(instants_of(index))];
        args.extend(members.iter().map(|m| Value::from(m.as_str())));
        let _: i64 = self.command("HDEL", index, args).await?;
        Ok(())
    }

    /// Removes `members` from the refusal index `index` (and their instants).
    pub async fn forget_refused(&self, index: &str, members: &[String]) -> Result<(), StoreError> {
        if members.is_empty() {
            return Ok(());
        }
        self.admin_deadline()
            .run(async {
                let mut args = vec![Value::from(index)];
                args.extend(members.iter().map(|m| Value::from(m.as_str())));
                let _: i64 = self.command("ZREM", index, args).await?;
                self.forget_instants(index, members).await
            })
            .await
    }

    /// The block markers at `keys` (`None` where there is none).
    pub async fn markers(&self, keys: &[String]) -> Result<Vec<Option<Marker>>, StoreError> {
        self.admin_deadline()
            .run(async {
                let reads = keys
                    .iter()
                    .map(|k| self.command::<Option<String>>("GET", k, vec![k.as_str().into()]));
                let values = futures_util::future::join_all(reads).await;
                values
                    .into_iter()
                    .map(|v| v.map(|v| v.and_then(|text| parse_marker(&text))))
                    .collect()
            })
            .await
    }

    /// Tells every instance (through Redis pub/sub on `channel`) to forget `base` in its deny
    /// cache. In a cluster any node carries a message to every node's subscribers; it goes to
    /// the node of the channel's slot, or, when that one cannot take it within `store.timeout`
    /// (down, failing over), to the first other primary that can.
    pub async fn publish_reset(&self, channel: &str, base: &str) -> Result<(), StoreError> {
        let args: Vec<Value> = vec![channel.into(), base.into()];
        let cluster = self.connection().nodes.is_cluster();
        let first_try = match cluster {
            true => Deadline::after(self.inner.timeout),
            false => self.admin_deadline(),
        };
        let published = first_try
            .run(self.command::<i64>("PUBLISH", channel, args.clone()))
            .await;
        match published {
            Err(e @ (StoreError::Connection(_) | StoreError::Timeout(_))) if cluster => self
                .admin_deadline()
                .run(self.publish_elsewhere(channel, args))
                .await
                .map_err(|_| e),
            published => published.map(|_| ()),
        }
    }

    /// `PUBLISH` with `args` on the first primary besides the one of `channel`'s slot that
    /// takes it.
    async fn publish_elsewhere(&self, channel: &str, args: Vec<Value>) -> Result<(), StoreError> {
        let nodes = &self.connection().nodes;
        let failed = nodes
            .for_slot(slot_of(channel.as_bytes()))
            .and_then(|n| n.server);
        let mut last = StoreError::Connection("no other primary to publish on".into());
        for server in nodes.every_node().into_iter().filter_map(|n| n.server) {
            if Some(&server) == failed.as_ref() {
                continue;
            }
            let command = CustomCommand::new_static("PUBLISH", ClusterHash::Random, false);
            let route = Route::Node(server);
            let sent = send(
                nodes,
                route,
                (command, args.clone()),
                None,
                OnTryAgain::Return,
            );
            match Box::pin(sent).await.reply {
                Ok(_) => return Ok(()),
                Err(e) => last = map_error(e),
            }
        }
        Err(last)
    }
}

/// A block marker's text: `"<limit name> <block end µs> <level>"`.
pub fn parse_marker(text: &str) -> Option<Marker> {
    let mut parts = text.split(' ');
    let (name, until, level) = (parts.next()?, parts.next()?, parts.next()?);
    Some(Marker {
        name: name.to_string(),
        until: until.parse().ok()?,
        level: level.parse().ok()?,
    })
}

/// Whether `client`'s server answers as a master: its `ROLE`, or, for a user whose ACL denies
/// `ROLE` (an administrative command), its `PING`.
async fn answers_as_master(client: &fred::clients::Client) -> Result<(), StoreError> {
    let role = CustomCommand::new_static("ROLE", ClusterHash::Random, false);
    let reply: Value = match client.custom(role, Vec::<Value>::new()).await {
        Ok(reply) => reply,
        Err(e) if e.details().starts_with("NOPERM") => {
            let _: String = client.ping(None).await.map_err(map_error)?;
            return Ok(());
        }
        Err(e) => return Err(map_error(e)),
    };
    match reply
        .into_array()
        .first()
        .and_then(Value::as_str)
        .as_deref()
    {
        Some("master") => Ok(()),
        Some(role) => Err(StoreError::Connection(format!(
            "the store's server is a {role}, which refuses writes (READONLY)"
        ))),
        None => Err(StoreError::Connection("ROLE gave no role".into())),
    }
}

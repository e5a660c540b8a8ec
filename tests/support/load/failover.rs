//! The failovers the `fault_*failover*` tests run under load: a Redis Cluster's first master or
//! a sentinel set's master killed, a replica of it promoted.
//!
//! With `store.replica_acks = 1` ([`Acks::One`]) the dying master has two replicas, both of
//! which fall behind before it dies ([`Acks::Alone`]: its one replica does, and is promoted
//! with no replica of its own, so deciding resumes only because the wait then asks for none): they are paused (SIGSTOP), their replication links cut
//! (`CLIENT KILL TYPE replica` on the master, which then keeps deciding alone) for [`STALL`],
//! and resumed right after the kill, so the master dies holding a second of writes no replica
//! has (what an acknowledgement is for; a pause alone would lose nothing, since the kernel
//! buffers of the link hold a second of writes and deliver them even after the kill). The promoted one still has a replica then (the other follows it), so allowed
//! decisions for its keys can be acknowledged again; in a cluster every other master gets a
//! replica too, or none of its decisions could be.

use std::time::{Duration, Instant};

use super::client::{Keys, Load};
use super::probe::{info, is_master, users_in};
use super::run::Run;
use super::{routes, store, wait_until};
use crate::support::cluster::{FailoverCluster, SLOTS};
use crate::support::gateway::{self, config};
use crate::support::redis::{RedisServer, Resp};
use crate::support::sentinel::Sentinel;
use crate::support::{unique_prefix, upstream};

/// How long the replicas of a dying master stay paused before it dies.
pub const STALL: Duration = Duration::from_millis(1000);

/// The gateway's `store.replica_acks`, and the topology that goes with it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// 0: the dying master has one replica, in sync (other cluster masters none).
    None,
    /// 1: the dying master has two replicas, both lagging when it dies (every other cluster
    /// master one).
    One,
    /// 1: the dying master has one replica, lagging when it dies (every other cluster master
    /// one): the promoted replica has none.
    Alone,
}

impl Acks {
    fn replica_acks(self) -> u32 {
        match self {
            Acks::None => 0,
            Acks::One | Acks::Alone => 1,
        }
    }

    /// Replicas of the master that dies.
    fn replicas(self) -> usize {
        match self {
            Acks::None | Acks::Alone => 1,
            Acks::One => 2,
        }
    }
}

/// How the master goes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Death {
    /// SIGKILL: its connections close.
    Killed,
    /// SIGSTOP, never resumed: its connections stay open and it answers nothing.
    Hung,
}

/// What a failover run saw, and when.
pub struct Failover {
    pub run: Run,
    /// The key prefix of the gateway.
    pub prefix: String,
    pub t0: Instant,
    pub killed: Instant,
    /// A replica reported `role:master`.
    pub promoted: Instant,
    /// The store answered again as the gateway sees it: the promotion in a cluster, the
    /// sentinels naming the new master otherwise.
    pub back: Instant,
}

/// A cluster whose first master is killed under load. Returns the cluster as it is after the
/// run (the first master dead, one of its replicas promoted).
pub async fn cluster(acks: Acks) -> (FailoverCluster, Failover) {
    let others = (acks != Acks::None) as usize;
    let per_master = [acks.replicas(), others, others];
    let mut cluster = tokio::task::spawn_blocking(move || FailoverCluster::start(per_master))
        .await
        .unwrap();
    // A few hot keys on the master about to die (slots SLOTS[0]), 5 % of the requests (as in
    // bench/faults); the others spread over every slot, so over the three masters.
    let hot = users_in("allow", SLOTS[0].0 as u16..=SLOTS[0].1 as u16, 4);
    let url = cluster.url();
    let (master, replicas) = (&mut cluster.masters[0], &cluster.replicas[0]);
    let keys = Keys::new(hot, 0.05);
    // The store answers again as soon as the replica is promoted.
    let failover = under_load(
        &url,
        "fl-cfail",
        acks,
        Death::Killed,
        keys,
        master,
        replicas,
        || true,
    )
    .await;
    (cluster, failover)
}

/// A `redis-sentinel://` store (a master, its replicas, three sentinels with quorum 2) whose
/// master is killed under load. Returns the replicas and which of them the sentinels all name
/// as the master at the end: the one promoted, or, when a sentinel found it slow to answer on
/// this busy machine (down after 1 s) and failed over again, the one promoted then, which
/// replicated from it (every test then checks that nothing was lost through both failovers).
pub async fn sentinel(acks: Acks) -> (Vec<RedisServer>, usize, Failover) {
    sentinel_master(acks, Death::Killed).await
}

/// [`sentinel`], the master going as `death` says.
pub async fn sentinel_master(acks: Acks, death: Death) -> (Vec<RedisServer>, usize, Failover) {
    let (mut master, replicas, sentinels) = tokio::task::spawn_blocking(move || {
        let master = RedisServer::start();
        let port = master.port.to_string();
        let replicas: Vec<RedisServer> = (0..acks.replicas())
            .map(|_| RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]))
            .collect();
        let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(master.port, 2)).collect();
        (master, replicas, sentinels)
    })
    .await
    .unwrap();
    wait_until(Duration::from_secs(20), "replicas synced", || {
        replicas
            .iter()
            .all(|r| info(r, "replication").contains("master_link_status:up"))
    })
    .await;
    wait_until(
        Duration::from_secs(30),
        "sentinels know the replicas and each other",
        || sentinels.iter().all(|s| s.knows(replicas.len(), 2)),
    )
    .await;
    let hosts: Vec<String> = sentinels
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port))
        .collect();
    let url = format!("redis-sentinel://{}/main", hosts.join(","));
    let keys = Keys::new(vec!["hot".into()], 0.1);
    // The store answers again once the sentinels name the promoted replica.
    let named = || {
        let port = sentinels[0].master_port();
        replicas.iter().any(|r| port == Some(r.port))
    };
    let failover = under_load(
        &url,
        "fl-sentinel",
        acks,
        death,
        keys,
        &mut master,
        &replicas,
        named,
    )
    .await;
    wait_until(
        Duration::from_secs(20),
        "the sentinels name one master",
        || {
            let named = sentinels[0].master_port();
            named.is_some() && sentinels.iter().all(|s| s.master_port() == named)
        },
    )
    .await;
    let named = sentinels[0].master_port();
    let master = (replicas.iter().position(|r| Some(r.port) == named))
        .unwrap_or_else(|| panic!("the sentinels name {named:?}, no replica"));
    (replicas, master, failover)
}

/// Runs the load on `keys` through a gateway on `url` (`store.replica_acks` as `acks` says)
/// for 1.5 s, kills or hangs `master` as `death` says ([`kill`]), waits until one of `replicas` is promoted and `back`
/// holds, then 3.5 s more.
#[allow(clippy::too_many_arguments)]
async fn under_load(
    url: &str,
    test: &str,
    acks: Acks,
    death: Death,
    keys: Keys,
    master: &mut RedisServer,
    replicas: &[RedisServer],
    back: impl Fn() -> bool,
) -> Failover {
    let up = upstream::start().await;
    let prefix = unique_prefix(test);
    let store = format!(
        "{}\nreplica_acks = {}",
        store(url, &prefix),
        acks.replica_acks()
    );
    let gw = gateway::start(&config(&store, &up.url(), &routes())).await;
    let t0 = Instant::now();
    let load = Load::start(gw.running().proxy_addr, keys);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let killed = kill(master, replicas, acks, death).await;
    let promoted = wait_until(Duration::from_secs(30), "replica promoted", || {
        replicas.iter().any(is_master)
    })
    .await;
    let back = wait_until(Duration::from_secs(30), "the store answers again", back).await;
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let run = load.stop().await;
    gw.stop().await;
    Failover {
        run,
        prefix,
        t0,
        killed,
        promoted,
        back,
    }
}

/// Kills `master` (SIGKILL), or hangs it (SIGSTOP); with acks, cuts it off its `replicas` (paused, links closed) for
/// [`STALL`] first, and resumes them right after. Returns when the master died.
async fn kill(
    master: &mut RedisServer,
    replicas: &[RedisServer],
    acks: Acks,
    death: Death,
) -> Instant {
    let stall = acks != Acks::None;
    if stall {
        replicas.iter().for_each(RedisServer::pause);
        let cut = master.cmd(&["CLIENT", "KILL", "TYPE", "replica"]);
        assert_eq!(
            cut,
            Resp::Int(replicas.len() as i64),
            "replication links cut"
        );
        tokio::time::sleep(STALL).await;
    }
    let killed = Instant::now();
    match death {
        Death::Killed => master.kill(),
        Death::Hung => master.pause(),
    }
    if stall {
        replicas.iter().for_each(RedisServer::resume);
    }
    killed
}

//! A real three-node Redis Cluster on free loopback ports, built with plain RESP commands
//! (`CLUSTER ADDSLOTSRANGE`, `CLUSTER MEET`), so it needs nothing beyond `redis-server`.

use std::time::{Duration, Instant};

use super::redis::{RedisServer, Resp};

/// The slots each node serves, in node order.
pub const SLOTS: [(i64, i64); 3] = [(0, 5460), (5461, 10922), (10923, 16383)];

/// Three masters sharing the 16384 slots.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts the nodes, assigns slots, joins them and waits for `cluster_state:ok` everywhere.
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    "2000",
                ])
            })
            .collect();
        assign_slots_and_meet(&nodes, &[]);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ok = nodes.iter().all(|n| match n.cmd(&["CLUSTER", "INFO"]) {
                Resp::Bulk(Some(info)) => {
                    info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3")
                }
                _ => false,
            });
            if ok {
                break;
            }
            assert!(Instant::now() < deadline, "the cluster did not form");
            std::thread::sleep(Duration::from_millis(100));
        }
        RedisCluster { nodes }
    }

    /// `redis-cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis-cluster://{}", hosts.join(","))
    }

    /// The index of the node serving `key`'s slot (`CLUSTER KEYSLOT`, which hashes the hash
    /// tag when the key has one).
    pub fn node_of(&self, key: &str) -> usize {
        let slot = self.nodes[0].cmd(&["CLUSTER", "KEYSLOT", key]).int();
        SLOTS
            .iter()
            .position(|&(from, to)| (from..=to).contains(&slot))
            .expect("every slot is served")
    }

    /// Total keys over every node.
    pub fn dbsize(&self) -> i64 {
        self.nodes.iter().map(|n| n.cmd(&["DBSIZE"]).int()).sum()
    }
}

/// Three masters sharing the slots as [`SLOTS`] says, `replicas[i]` following `masters[i]`:
/// `cluster-node-timeout` 1000 ms, so a dead master fails over in about 2 s, and
/// `cluster-require-full-coverage no`, so the other masters keep serving their slots meanwhile
/// (with Redis's default every node refuses every command from the moment the dead master is
/// marked failed until its replica is promoted).
pub struct FailoverCluster {
    pub masters: Vec<RedisServer>,
    pub replicas: Vec<Vec<RedisServer>>,
}

impl FailoverCluster {
    /// Starts the nodes (`per_master[i]` replicas for master `i`), assigns slots, joins them,
    /// attaches the replicas (`CLUSTER REPLICATE`) and waits until every node sees a healthy
    /// cluster and every replica is in sync.
    pub fn start(per_master: [usize; 3]) -> FailoverCluster {
        let args = [
            "--cluster-enabled",
            "yes",
            "--cluster-node-timeout",
            "1000",
            "--cluster-require-full-coverage",
            "no",
        ];
        let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_with(&args)).collect();
        let replicas: Vec<Vec<RedisServer>> = per_master
            .iter()
            .map(|&n| (0..n).map(|_| RedisServer::start_with(&args)).collect())
            .collect();
        assign_slots_and_meet(&masters, &replicas.iter().flatten().collect::<Vec<_>>());
        let deadline = Instant::now() + Duration::from_secs(30);
        for (master, followers) in masters.iter().zip(&replicas) {
            let Resp::Bulk(Some(master_id)) = master.cmd(&["CLUSTER", "MYID"]) else {
                panic!("CLUSTER MYID failed")
            };
            for replica in followers {
                // The replica must know the master before it can follow it.
                while replica.cmd(&["CLUSTER", "REPLICATE", &master_id])
                    != Resp::Simple("OK".into())
                {
                    assert!(
                        Instant::now() < deadline,
                        "CLUSTER REPLICATE never succeeded"
                    );
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        let nodes: Vec<&RedisServer> = masters.iter().chain(replicas.iter().flatten()).collect();
        let known = format!("cluster_known_nodes:{}", nodes.len());
        loop {
            let formed = nodes.iter().all(|n| {
                let text = info_of(n, &["CLUSTER", "INFO"]);
                text.contains("cluster_state:ok") && text.contains(&known)
            }) && replicas
                .iter()
                .flatten()
                .all(|r| info_of(r, &["INFO", "replication"]).contains("master_link_status:up"));
            if formed {
                break;
            }
            assert!(Instant::now() < deadline, "the cluster did not form");
            std::thread::sleep(Duration::from_millis(100));
        }
        FailoverCluster { masters, replicas }
    }

    /// `redis-cluster://` with the masters as seeds.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .masters
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.port))
            .collect();
        format!("redis-cluster://{}", hosts.join(","))
    }
}

/// Gives each of the three `masters` its [`SLOTS`] and has the first meet every other node.
fn assign_slots_and_meet(masters: &[RedisServer], others: &[&RedisServer]) {
    for (node, (from, to)) in masters.iter().zip(SLOTS) {
        let reply = node.cmd(&[
            "CLUSTER",
            "ADDSLOTSRANGE",
            &from.to_string(),
            &to.to_string(),
        ]);
        assert_eq!(
            reply,
            Resp::Simple("OK".into()),
            "ADDSLOTSRANGE on {}",
            node.port
        );
    }
    for other in masters[1..].iter().chain(others.iter().copied()) {
        masters[0].cmd(&["CLUSTER", "MEET", "127.0.0.1", &other.port.to_string()]);
    }
}

/// A bulk-string reply's text (empty when the node does not answer with one).
fn info_of(node: &RedisServer, command: &[&str]) -> String {
    match node.try_cmd(command) {
        Ok(Resp::Bulk(Some(text))) => text,
        _ => String::new(),
    }
}

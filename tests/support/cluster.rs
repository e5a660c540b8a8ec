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
        for (node, (from, to)) in nodes.iter().zip(SLOTS) {
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
        for other in &nodes[1..] {
            nodes[0].cmd(&["CLUSTER", "MEET", "127.0.0.1", &other.port.to_string()]);
        }
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

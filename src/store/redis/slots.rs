//! The cluster's slot table as the store last read it (`CLUSTER SLOTS`): which primary serves
//! each of the 16384 hash slots. A `MOVED` reply patches one slot at once, before the next full
//! read replaces the whole table, so the retried call and the calls after it go to the right
//! node without waiting for that read.

use std::collections::HashMap;

use fred::types::cluster::ClusterRouting;
use fred::types::config::Server;
use fred::types::Value;

/// Which primary serves each slot.
#[derive(Debug, Clone, Default)]
pub struct SlotTable {
    routing: Option<ClusterRouting>,
    /// Slots a `MOVED` reply named since the last full read.
    moved: HashMap<u16, Server>,
}

impl SlotTable {
    /// The table a `CLUSTER SLOTS` reply describes; `asked` is the node that answered (its
    /// address stands in for an empty host in the reply).
    pub fn from_reply(reply: Value, asked: &Server) -> Result<SlotTable, String> {
        let reply = with_empty_hosts_named(reply, asked);
        let routing = ClusterRouting::from_cluster_slots(reply, asked.host.clone())
            .map_err(|e| format!("CLUSTER SLOTS: {e}"))?;
        if routing.len() == 0 {
            return Err("CLUSTER SLOTS: the node serves no slots (not a cluster yet?)".into());
        }
        Ok(SlotTable {
            routing: Some(routing),
            moved: HashMap::new(),
        })
    }

    /// Whether the table was ever read.
    pub fn is_known(&self) -> bool {
        self.routing.is_some()
    }

    /// The primary serving `slot`, if the table knows one.
    pub fn primary(&self, slot: u16) -> Option<&Server> {
        if let Some(server) = self.moved.get(&slot) {
            return Some(server);
        }
        self.routing.as_ref()?.get_server(slot)
    }

    /// Every primary the table names, each once.
    pub fn primaries(&self) -> Vec<Server> {
        let mut out = self
            .routing
            .as_ref()
            .map_or_else(Vec::new, ClusterRouting::unique_primary_nodes);
        for server in self.moved.values() {
            if !out.contains(server) {
                out.push(server.clone());
            }
        }
        out
    }

    /// Whether `other` routes every slot as this one does.
    pub fn same_as(&self, other: &SlotTable) -> bool {
        self.moved == other.moved
            && match (&self.routing, &other.routing) {
                (Some(a), Some(b)) => a.slots() == b.slots(),
                (None, None) => true,
                _ => false,
            }
    }

    /// The table with `slot` served by `server`, as a `MOVED` reply says.
    pub fn with_moved(&self, slot: u16, server: Server) -> SlotTable {
        let mut next = self.clone();
        next.moved.insert(slot, server);
        next
    }
}

/// The reply with every node's empty host (a node that does not know its own address) replaced
/// by the address of the node that answered, as Redis asks clients to read it. (A `NULL` host,
/// Redis 7's unknown endpoint, is read so by the client library already.)
fn with_empty_hosts_named(reply: Value, asked: &Server) -> Value {
    let Value::Array(ranges) = reply else {
        return reply;
    };
    let ranges = ranges.into_iter().map(|range| {
        let Value::Array(fields) = range else {
            return range;
        };
        let fields = fields
            .into_iter()
            .enumerate()
            .map(|(i, field)| match field {
                Value::Array(mut node) if i >= 2 => {
                    if node
                        .first()
                        .is_some_and(|h| h.as_str().is_some_and(|h| h.is_empty()))
                    {
                        node[0] = Value::from(asked.host.clone());
                    }
                    Value::Array(node)
                }
                other => other,
            });
        Value::Array(fields.collect())
    });
    Value::Array(ranges.collect())
}

/// The hash slot of a key (its hash tag's, when it has one).
pub fn slot_of(key: &[u8]) -> u16 {
    ClusterRouting::hash_key(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64, id: &str) -> Value {
        Value::Array(vec![Value::from(host), Value::from(port), Value::from(id)])
    }

    fn reply() -> Value {
        Value::Array(vec![
            Value::Array(vec![
                Value::from(0),
                Value::from(5460),
                node("127.0.0.1", 7000, "a"),
                node("127.0.0.1", 7003, "d"),
            ]),
            Value::Array(vec![
                Value::from(5461),
                Value::from(16383),
                node("", 7001, "b"),
            ]),
        ])
    }

    #[test]
    fn a_reply_maps_every_slot_to_its_primary() {
        let asked = Server::new("10.0.0.9", 7001);
        let table = SlotTable::from_reply(reply(), &asked).unwrap();
        assert_eq!(table.primary(0), Some(&Server::new("127.0.0.1", 7000)));
        assert_eq!(table.primary(5460), Some(&Server::new("127.0.0.1", 7000)));
        // An empty host is the node that answered.
        assert_eq!(table.primary(5461), Some(&Server::new("10.0.0.9", 7001)));
        assert_eq!(table.primaries().len(), 2, "replicas are not primaries");
    }

    #[test]
    fn moved_patches_one_slot() {
        let table = SlotTable::from_reply(reply(), &Server::new("127.0.0.1", 7000)).unwrap();
        let patched = table.with_moved(7, Server::new("127.0.0.1", 7002));
        assert_eq!(patched.primary(7), Some(&Server::new("127.0.0.1", 7002)));
        assert_eq!(patched.primary(8), Some(&Server::new("127.0.0.1", 7000)));
        assert!(patched
            .primaries()
            .contains(&Server::new("127.0.0.1", 7002)));
        assert_eq!(table.primary(7), Some(&Server::new("127.0.0.1", 7000)));
    }

    #[test]
    fn an_empty_reply_is_refused() {
        let asked = Server::new("127.0.0.1", 7000);
        assert!(SlotTable::from_reply(Value::Array(Vec::new()), &asked).is_err());
        assert!(!SlotTable::default().is_known());
        assert_eq!(SlotTable::default().primary(0), None);
    }
}

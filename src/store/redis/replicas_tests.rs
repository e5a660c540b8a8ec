//! What the gateway knows of a master's replicas: `ROLE` read, counts kept per connection and
//! shared per node, a lag seen and ended.

use super::*;

fn replica(port: &str) -> Value {
    Value::Array(vec!["127.0.0.1".into(), port.into(), "100".into()])
}

#[test]
fn role_counts_a_masters_replicas() {
    let master = |listed: Vec<Value>| {
        Value::Array(vec![
            "master".into(),
            Value::Integer(100),
            Value::Array(listed),
        ])
    };
    let count = |reply: Value| replicas_in(reply).map(|o| o.replicas.len());
    assert_eq!(count(master(vec![])), Some(0));
    assert_eq!(
        replicas_in(master(vec![replica("7001"), replica("7002")])),
        Some(Offsets {
            master: 100,
            replicas: vec![100, 100]
        })
    );
    let slave = Value::Array(vec![
        "slave".into(),
        "127.0.0.1".into(),
        Value::Integer(7000),
    ]);
    assert_eq!(replicas_in(slave), None);
}

/// A lag ends when a `WAIT` counts enough replicas, or when `ROLE` shows them holding what
/// the master had written at the read before; a replica that stands still keeps it.
#[test]
fn a_lag_ends_once_the_replicas_caught_up() {
    let replicas = Replicas::default();
    replicas.connected("127.0.0.1:7000".into());
    replicas.counted(1);
    let read = |master: u64, replica: u64| Offsets {
        master,
        replicas: vec![replica],
    };
    replicas.short();
    assert!(replicas.lagging());
    replicas.offsets_read(&read(500, 100), 1);
    replicas.offsets_read(&read(900, 100), 1);
    assert!(replicas.lagging(), "a replica that stands still lags");
    replicas.offsets_read(&read(1200, 950), 1);
    assert!(
        !replicas.lagging(),
        "it holds what the master had a read ago"
    );
    replicas.short();
    replicas.caught_up(replicas.connection());
    assert!(!replicas.lagging(), "a WAIT that counted enough");
    replicas.short();
    replicas.connected("127.0.0.1:7001".into());
    assert!(!replicas.lagging(), "a new master");
}

/// A `WAIT` sent to the old master before a failover, answered once that master wakes
/// (it was stopped, not dead), counts nothing for the new master, which has no replica:
/// taking its count would make every wait ask for a replica that is not there.
#[test]
fn a_late_wait_on_a_replaced_connection_counts_nothing() {
    let replicas = Replicas::default();
    replicas.connected("127.0.0.1:7000".into());
    replicas.counted(1);
    let on_old_master = replicas.connection();
    replicas.connected("127.0.0.1:7001".into());
    replicas.counted(0);
    replicas.acknowledged(1, on_old_master);
    assert_eq!(replicas.wanted(1), 0, "the new master has no replica");
    replicas.acknowledged(1, replicas.connection());
    assert_eq!(replicas.wanted(1), 1, "one on its own connection counts");
}

#[test]
fn every_connection_to_a_node_shares_its_replicas() {
    let book = ReplicaBook::default();
    let (first, second) = (book.of(None), book.of(None));
    assert!(Arc::ptr_eq(&first, &second));
    let node = Server::new("127.0.0.1", 7000);
    assert!(!Arc::ptr_eq(&first, &book.of(Some(&node))));
    first.counted(0);
    assert_eq!(second.wanted(1), 0, "one worker's count is every worker's");
    drop((first, second));
    assert_eq!(
        book.of(None).wanted(1),
        1,
        "no connection left: known afresh"
    );
}

#[test]
fn the_wait_asks_for_the_fewer_of_the_setting_and_the_replicas() {
    let replicas = Replicas::default();
    assert_eq!(replicas.wanted(2), 2, "unknown: as configured");
    assert_eq!(replicas.seen(), None);
    replicas.connected("127.0.0.1:7000".into());
    replicas.counted(0);
    assert_eq!(replicas.wanted(2), 0, "no replica: no wait");
    assert_eq!(replicas.seen(), Some(("127.0.0.1:7000".into(), 0)));
    replicas.acknowledged(1, replicas.connection());
    assert_eq!(replicas.wanted(2), 1, "a WAIT that counted one raises it");
    replicas.acknowledged(0, replicas.connection());
    assert_eq!(
        replicas.wanted(2),
        1,
        "a WAIT that counted fewer lowers nothing"
    );
    replicas.counted(3);
    assert_eq!(replicas.wanted(2), 2);
    // fewer listed: taken only once they have been missing for LOST_AFTER
    let t0 = Instant::now();
    replicas.listed(1, t0);
    assert_eq!(replicas.wanted(2), 2, "a link that broke may come back");
    replicas.listed(1, t0 + LOST_AFTER / 2);
    assert_eq!(replicas.wanted(2), 2);
    replicas.listed(3, t0 + LOST_AFTER / 2);
    replicas.listed(1, t0 + LOST_AFTER);
    assert_eq!(
        replicas.wanted(2),
        2,
        "back in between: the wait starts again"
    );
    replicas.listed(1, t0 + 2 * LOST_AFTER);
    assert_eq!(replicas.wanted(2), 1, "missing for LOST_AFTER: lost");
    replicas.connected("127.0.0.1:7001".into());
    assert_eq!(
        replicas.wanted(2),
        2,
        "a new connection: as configured again"
    );
}

//! Reads the Redis servers under a fault test: INFO fields, error stats, key counts, and which
//! users' keys hash to given cluster slots.

use crate::support::redis::{RedisServer, Resp};

pub fn info(server: &RedisServer, section: &str) -> String {
    match server.try_cmd(&["INFO", section]) {
        Ok(Resp::Bulk(Some(text))) => text,
        _ => String::new(),
    }
}

pub fn is_master(server: &RedisServer) -> bool {
    info(server, "replication").contains("role:master")
}

/// `errorstat_<NAME>` of `INFO errorstats` (0 when absent).
pub fn errorstat(server: &RedisServer, name: &str) -> i64 {
    let field = format!("errorstat_{name}:count=");
    info(server, "errorstats")
        .lines()
        .find_map(|l| l.trim_end().strip_prefix(field.as_str())?.parse().ok())
        .unwrap_or(0)
}

/// The sum of ZCARD of `key` over `servers` (a key lives on one of them; others answer MOVED).
pub fn zcard_on(servers: &[&RedisServer], key: &str) -> i64 {
    servers
        .iter()
        .map(|s| match s.cmd(&["ZCARD", key]) {
            Resp::Int(n) => n,
            _ => 0,
        })
        .sum()
}

/// CRC16/XMODEM of Redis Cluster's key slots.
fn slot(tag: &str) -> u16 {
    let mut crc: u16 = 0;
    for &b in tag.as_bytes() {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// `count` user names whose key on `route` hashes to a slot in `slots`.
pub fn users_in(route: &str, slots: std::ops::RangeInclusive<u16>, count: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("h{i}"))
        .filter(|u| slots.contains(&slot(&format!("{route}|{u}"))))
        .take(count)
        .collect()
}

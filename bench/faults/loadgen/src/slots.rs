//! The `slot-users` command: user names whose rate-limit key (hash tag `{ROUTE|USER}`) lies in
//! given Redis Cluster slots (so the hot users' keys lie in the slots a cluster fault moves or whose
//! master it kills).

use crate::{die, Opts};

/// Redis Cluster's number of key slots.
const SLOTS: u16 = 16384;

/// The `slot-users` command: prints the first `--count` names `P1`, `P2`... (comma-separated)
/// whose key falls into the slots `--from`..=`--to`.
pub fn slot_users(opts: &Opts) {
    let route = opts.req("route");
    let prefix = opts.req("prefix");
    let from: u16 = opts.num("from", None);
    let to: u16 = opts.num("to", None);
    let count: usize = opts.num("count", Some(1));
    let mut found = Vec::new();
    for i in 1u64..50_000_000 {
        let user = format!("{prefix}{i}");
        if (from..=to).contains(&slot(route, &user)) {
            found.push(user);
            if found.len() == count {
                println!("{}", found.join(","));
                return;
            }
        }
    }
    die("no such users found");
}

/// The slot of the key of `user` on `route`: the CRC16 of its hash tag `ROUTE|USER`.
fn slot(route: &str, user: &str) -> u16 {
    crc16(format!("{route}|{user}").as_bytes()) % SLOTS
}

/// CRC16/XMODEM, the hash of Redis Cluster's key slots.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

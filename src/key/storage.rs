//! The Redis key layout (documented in `lua/README.md`):
//!
//! ```text
//! <prefix>:{<route>|<material>}:<limit>        sliding_log: one sorted set per limit
//! <prefix>:{<route>|<material>}#swc            sliding_window_counter: one hash, a field per limit
//! <prefix>:{<route>|<material>}#block          block marker (on_exceed = "block")
//! ```
//!
//! `<material>` is the derived key itself when it is short printable ASCII without `{`, `}` or
//! `#`; anything else is replaced by `#` and 32 hex digits of its SHA-256. Route and limit names
//! are restricted by the config to `[A-Za-z0-9_.-]`, so a client can neither break the hash tag
//! nor make one key collide with another, and no key grows past a bounded length.

use sha2::{Digest, Sha256};

/// Derived keys longer than this are hashed.
pub const MAX_RAW_KEY_LEN: usize = 64;

/// The derived key as it appears inside the Redis key.
pub fn storage_material(key: &str) -> std::borrow::Cow<'_, str> {
    let safe = key.len() <= MAX_RAW_KEY_LEN
        && !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_graphic() && !b"{}#".contains(&b));
    if safe {
        return std::borrow::Cow::Borrowed(key);
    }
    let digest = Sha256::digest(key.as_bytes());
    let mut out = String::with_capacity(33);
    out.push('#');
    for b in &digest[..16] {
        out.push_str(&format!("{b:02x}"));
    }
    std::borrow::Cow::Owned(out)
}

/// The derived key as logs show it: itself (what `/admin/usage` takes) up to
/// [`MAX_RAW_KEY_LEN`] bytes, whatever its characters; a longer one as stored (hashed), so a
/// client cannot make log lines grow without bound.
pub fn logged_key(key: &str) -> std::borrow::Cow<'_, str> {
    if key.len() <= MAX_RAW_KEY_LEN {
        std::borrow::Cow::Borrowed(key)
    } else {
        storage_material(key)
    }
}

/// `<prefix>:{<route>|<material>}`: the part every key of one decision shares, hash tag included.
pub fn decision_base(prefix: &str, route: &str, key: &str) -> String {
    let material = storage_material(key);
    let mut base = String::with_capacity(prefix.len() + route.len() + material.len() + 4);
    base.push_str(prefix);
    base.push_str(":{");
    base.push_str(route);
    base.push('|');
    base.push_str(&material);
    base.push('}');
    base
}

/// The sorted set of one `sliding_log` limit.
pub fn sorted_set_key(base: &str, limit: &str) -> String {
    let mut key = String::with_capacity(base.len() + limit.len() + 1);
    key.push_str(base);
    key.push(':');
    key.push_str(limit);
    key
}

/// The hash holding every `sliding_window_counter` limit of a key.
pub fn counter_key(base: &str) -> String {
    format!("{base}#swc")
}

/// The key of the block marker.
pub fn block_key(base: &str) -> String {
    format!("{base}#block")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_safe_keys_stay_readable() {
        assert_eq!(
            decision_base("sg", "otp", "203.0.113.7|POST"),
            "sg:{otp|203.0.113.7|POST}"
        );
    }

    #[test]
    fn hostile_or_long_keys_are_hashed() {
        for key in [
            "a}b",
            "x{y",
            "#abc",
            "with space",
            &"z".repeat(65),
            "ünïcode",
            "",
        ] {
            let m = storage_material(key);
            assert!(m.starts_with('#') && m.len() == 33, "{key:?} -> {m}");
        }
        assert_ne!(storage_material("a}b"), storage_material("a}c"));
    }
}

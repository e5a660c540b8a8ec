//! The Redis key layout (documented in `lua/README.md`):
//!
//! ```text
//! <prefix>:{<route>|<material>}#log            sliding_log: one sorted set for the limits of the
//!                                              route's key (#log.<class> for outcome-counted ones)
//! <prefix>:{<route>~<spec>|<material>}#log     the same for a limit with a key of its own
//! <prefix>:{<route>|<material>}#swc            sliding_window_counter: one hash, a field per limit
//! <prefix>:{<route>|<material>}#gcra           gcra: one hash, a field per limit
//! <prefix>:{<route>|<material>}#block          block marker of that key (on_exceed = "block")
//! <prefix>:blocked:{<route>}                   the route's refusals now, for /admin/blocked
//!                                              (`super::refused`: member `<limit>|<material>`,
//!                                              score the refusal's end)
//! <prefix>:{<domain>~<rule>|<material>}#log     a rate-limit service rule's count (any of the
//!                                              three suffixes): <rule> is 8 hex digits of the
//!                                              rule's place in its tree, <material> made of the
//!                                              descriptor's values joined with `|`
//! ```
//!
//! `<material>` is the derived key itself when it is short printable ASCII without `{`, `}` or
//! `#`; anything else is replaced by `#` and 32 hex digits of its SHA-256. Route and limit names
//! are restricted by the config to `[A-Za-z0-9_.-]` and `<spec>` is hex, so a client can neither
//! break the hash tag nor make one key collide with another, and no key grows past a bound.

use std::borrow::Cow;

use sha2::{Digest, Sha256};

/// Derived keys longer than this are hashed.
pub const MAX_RAW_KEY_LEN: usize = 64;

/// The derived key as it appears inside the Redis key.
pub fn material(key: &str) -> Cow<'_, str> {
    let safe = key.len() <= MAX_RAW_KEY_LEN
        && !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_graphic() && !b"{}#".contains(&b));
    if safe {
        return Cow::Borrowed(key);
    }
    Cow::Owned(hashed(key))
}

/// `#` and 32 hex digits of the SHA-256 of `key`.
pub fn hashed(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    let mut out = String::with_capacity(33);
    out.push('#');
    push_hex(&mut out, &digest[..16]);
    out
}

/// Appends `bytes` in lower-case hex.
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 0xf) as usize] as char);
    }
}

/// The derived key as logs show it: [`named_key`] up to [`MAX_RAW_KEY_LEN`] bytes, whatever its
/// characters; a longer one as stored (hashed), so a client cannot make log lines grow
/// without bound.
pub fn logged_key(key: &str) -> Cow<'_, str> {
    if key.len() <= MAX_RAW_KEY_LEN {
        named_key(key)
    } else {
        Cow::Owned(hashed(key))
    }
}

/// The derived key as an operator names it back (`/admin/usage`'s `key`, which takes `#` and
/// 32 hex digits as a key already hashed): itself, unless a client spelled it in that very
/// form, which is then given as stored (hashed), so it never names the long key that hashes
/// to it.
pub fn named_key(key: &str) -> Cow<'_, str> {
    if is_hashed(key) {
        Cow::Owned(hashed(key))
    } else {
        Cow::Borrowed(key)
    }
}

/// `<prefix>:{<route><spec>|<material>}`: the part every key of one key slot shares, hash tag
/// included; `spec` is empty for the route's own key, `~<hex>` for a limit's own.
pub fn base(prefix: &str, route: &str, spec: &str, key: &str) -> String {
    base_of_material(prefix, route, spec, &material(key))
}

/// [`base`] of a key an operator names: a key as logs and `/admin/blocked` show it, so `#` and
/// 32 hex digits is taken as already hashed (the form shown for a key too long to print).
pub fn base_of_named(prefix: &str, route: &str, spec: &str, key: &str) -> String {
    if is_hashed(key) {
        base_of_material(prefix, route, spec, key)
    } else {
        base(prefix, route, spec, key)
    }
}

/// Whether `text` is a key as stored when long: `#` and 32 hex digits.
pub fn is_hashed(text: &str) -> bool {
    text.len() == 33 && text.starts_with('#') && text[1..].bytes().all(|b| b.is_ascii_hexdigit())
}

/// [`base`] from a key's material itself (a logged key that is already hashed).
pub fn base_of_material(prefix: &str, route: &str, spec: &str, material: &str) -> String {
    let mut base =
        String::with_capacity(prefix.len() + route.len() + spec.len() + material.len() + 4);
    base.push_str(prefix);
    base.push_str(":{");
    base.push_str(route);
    base.push_str(spec);
    base.push('|');
    base.push_str(material);
    base.push('}');
    base
}

/// A state's key: the base and the algorithm's suffix.
pub fn state_key(base: &str, suffix: &str) -> String {
    let mut key = String::with_capacity(base.len() + suffix.len());
    key.push_str(base);
    key.push_str(suffix);
    key
}

/// The key of a key slot's block marker.
pub fn block_key(base: &str) -> String {
    state_key(base, "#block")
}

/// The sorted set of a route's refusals now (its own hash tag: one per route; an `[rls]`
/// domain's by the domain's name).
pub fn blocked_index(prefix: &str, route: &str) -> String {
    format!("{prefix}:blocked:{{{route}}}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_safe_keys_stay_readable() {
        assert_eq!(
            base("sg", "otp", "", "203.0.113.7|POST"),
            "sg:{otp|203.0.113.7|POST}"
        );
        assert_eq!(base("sg", "otp", "~ab12", "x"), "sg:{otp~ab12|x}");
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
            let m = material(key);
            assert!(m.starts_with('#') && m.len() == 33, "{key:?} -> {m}");
        }
        assert_ne!(material("a}b"), material("a}c"));
    }

    #[test]
    fn a_key_spelled_as_a_hashed_one_is_not_logged_as_the_long_key_it_names() {
        let long = "x".repeat(65);
        let shown_long = logged_key(&long).into_owned();
        assert_eq!(shown_long, hashed(&long));
        // A client sending the long key's logged form as its own value.
        let mimic = logged_key(&shown_long).into_owned();
        assert_ne!(mimic, shown_long);
        // Shown as stored, so that /admin/usage, taking it as hashed, reaches the mimic's own.
        assert_eq!(mimic, material(&shown_long));
        assert_eq!(
            base_of_named("sg", "r", "", &mimic),
            base("sg", "r", "", &shown_long)
        );
        assert_eq!(logged_key("203.0.113.7|POST"), "203.0.113.7|POST");
    }
}

//! A key part's options, in order: `normalize` (one spelling of a phone number, an email
//! address, or any text), `prefix` (the first N characters: one limit for a country or an
//! operator's number range), `hash` (16 bytes of HMAC-SHA256 under the `[keys]` secret, in hex:
//! the raw value then reaches neither Redis, nor logs, nor metrics, nor admin answers). Without
//! `hash`, the value is escaped for the key.

use hmac::{Hmac, Mac};
use phonenumber::country::Id;
use sha2::Sha256;

use super::email::normalize_email;
use super::escape::escape_owned;
use super::fold::{fold, trimmed};
use super::phone::normalize_phone;
use super::source::Absent;
use crate::config::{HashSecret, KeyPartSpec, Normalize};

/// The part's value in the key; [`Absent`] when nothing is left of it, or when it is not valid
/// for its normalisation (then the part counts as missing).
pub fn apply(
    spec: &KeyPartSpec,
    raw: Vec<u8>,
    secret: Option<&HashSecret>,
) -> Result<String, Absent> {
    let mut value = match spec.normalize {
        None => raw,
        Some(how) => {
            let invalid = Absent::Invalid(what_it_must_be(how));
            let text = std::str::from_utf8(&raw).map_err(|_| invalid)?;
            normalize(how, text, spec.region)
                .ok_or(invalid)?
                .into_bytes()
        }
    };
    if let Some(n) = spec.prefix {
        value = prefix(value, n);
    }
    if value.is_empty() {
        return Err(Absent::NotSent);
    }
    match (spec.hash, secret) {
        (true, Some(secret)) => Ok(hash_value(secret, &value)),
        // The config refuses `hash = true` without a secret.
        (true, None) => Err(Absent::NotSent),
        (false, _) => Ok(escape_owned(value)),
    }
}

fn normalize(how: Normalize, text: &str, region: Option<Id>) -> Option<String> {
    match how {
        Normalize::Phone => normalize_phone(text, region),
        Normalize::Email => normalize_email(text),
        Normalize::Lower => Some(fold(trimmed(text))),
        Normalize::Bearer => bearer_token(text),
    }
}

/// The token of a `Bearer` credential as an upstream reads it (RFC 6750: the scheme in any
/// case, one or more spaces before the token), so no spelling of the header makes another key.
fn bearer_token(text: &str) -> Option<String> {
    let text = text.trim_matches([' ', '\t']);
    let (scheme, token) = text.split_once([' ', '\t'])?;
    let token = token.trim_matches([' ', '\t']);
    let valid = !token.is_empty() && !token.contains([' ', '\t', ',']);
    (scheme.eq_ignore_ascii_case("bearer") && valid).then(|| token.to_string())
}

/// What a value must be for `how` to read it (the 400's detail says it is not).
fn what_it_must_be(how: Normalize) -> &'static str {
    match how {
        Normalize::Phone => "a valid phone number",
        Normalize::Email => "a valid e-mail address",
        Normalize::Lower => "text (UTF-8)",
        Normalize::Bearer => "a Bearer credential",
    }
}

/// The first `n` characters (bytes, for a value that is not UTF-8).
fn prefix(mut value: Vec<u8>, n: usize) -> Vec<u8> {
    match std::str::from_utf8(&value) {
        Ok(text) => {
            let end = text.char_indices().nth(n).map_or(text.len(), |(i, _)| i);
            value.truncate(end);
        }
        Err(_) => value.truncate(n),
    }
    value
}

/// The first 16 bytes, in hex, of the HMAC-SHA256 of `value` under `secret`.
pub fn hash_value(secret: &HashSecret, value: &[u8]) -> String {
    let mut mac = <Hmac<Sha256>>::new_from_slice(&secret.0).expect("HMAC takes a key of any size");
    mac.update(value);
    let digest = mac.finalize().into_bytes();
    let mut out = String::with_capacity(32);
    crate::store::layout::push_hex(&mut out, &digest[..16]);
    out
}

#[cfg(test)]
mod bearer_tests {
    use super::bearer_token;

    #[test]
    fn every_spelling_of_one_bearer_credential_is_one_token() {
        for text in [
            "Bearer sk-AbC",
            "bearer sk-AbC",
            "BEARER  sk-AbC ",
            " Bearer\tsk-AbC",
        ] {
            assert_eq!(bearer_token(text).as_deref(), Some("sk-AbC"), "{text:?}");
        }
        for text in [
            "sk-AbC",
            "Basic dXNlcg==",
            "Bearer",
            "Bearer a b",
            "Bearerx y",
        ] {
            assert_eq!(bearer_token(text), None, "{text:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_count_characters() {
        assert_eq!(prefix(b"+6281234".to_vec(), 6), b"+62812");
        assert_eq!(prefix("jörg".as_bytes().to_vec(), 2), "jö".as_bytes());
        assert_eq!(prefix(b"ab".to_vec(), 6), b"ab");
    }
}

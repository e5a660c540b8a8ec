//! Rate-limit keys: which parts of a request identify "who" a limit counts, and how their values
//! become the derived key (`203.0.113.7|POST`). Each part's value is read ([`value`]), brought
//! to one spelling and cut or hashed as its options say ([`options`]), then escaped, so that two
//! different tuples of values never give the same key: `%`, `|`, control characters and bytes
//! that are not UTF-8 are written `%XX`, and a part that fell back to the client IP is written
//! `%ip:<address>`, which no escaped value can equal (a `%` is always followed by hex digits).

mod body;
mod body_kind;
mod client_ip;
mod email;
mod escape;
mod fold;
mod form;
mod jwt;
mod names;
mod options;
mod phone;
mod phone_spelling;
mod read_error;
mod source;
mod value;

use std::net::IpAddr;

use http::HeaderMap;

pub use body_kind::BodyKind;
pub use client_ip::{
    chain_as_listed, chain_header, client_ip, ip_key, is_trusted, unvouched_forwarding,
    X_FORWARDED_FOR, X_REAL_IP,
};
pub use escape::{escape, escape_into};
pub use form::decoded_pairs;
pub use jwt::JwtVerifier;
pub use options::hash_value;
pub use phone::normalize_phone;
pub use read_error::ReadError;
use source::Absent;
pub use source::KeySource;

use crate::config::{HashSecret, KeyPartSpec, KeySpec, OnMissingKey, PathCase};

/// Why a key could not be derived.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A part the request does not carry (and the route rejects such requests).
    #[error("the request has no {part} (needed for the rate-limit key)")]
    Missing {
        /// The part, as written in the config.
        part: String,
    },
    /// A part the request carries with a value that is not one (a missing part too: the same
    /// code, a detail that says what is wrong).
    #[error("{part} is not {what} (needed for the rate-limit key)")]
    Invalid {
        /// The part, as written in the config.
        part: String,
        /// What the value must be: "a valid phone number".
        what: &'static str,
    },
    /// A part the request names twice (header lines, query parameters, body members or
    /// fields), in a spelling a framework reads as its name, or a body part also in the query.
    #[error("the request names {part} more than once (twice, in another spelling, or in the body and the query); send it once")]
    Ambiguous {
        /// The part, as written in the config.
        part: String,
    },
    /// A value parsers read differently (a JSON number that is not a plain integer below
    /// 2^53): any key chosen for it could be another account for the upstream.
    #[error("{part} is not {what} (needed for the rate-limit key)")]
    Unclear {
        /// The part, as written in the config.
        part: String,
        /// What it must be.
        what: &'static str,
    },
}

/// Joins the key parts' values with `|` in config order, e.g. `203.0.113.7|POST`. A missing
/// part is an error or, with [`OnMissingKey::Ip`], the client IP marked as a fallback.
pub fn derive_key(
    spec: &KeySpec,
    on_missing: OnMissingKey,
    src: &KeySource<'_>,
) -> Result<String, KeyError> {
    derive(spec, on_missing, src, None)
}

/// [`derive_key`], and the values as the request sent them (each trimmed, a JSON number's
/// digits; escaped and joined as the key joins them): what tells apart two values a key merges
/// (`Victim@x` and `victim@x` under `lower`).
pub fn derive_key_and_sent(
    spec: &KeySpec,
    on_missing: OnMissingKey,
    src: &KeySource<'_>,
) -> Result<(String, String), KeyError> {
    let mut sent = String::new();
    let key = derive(spec, on_missing, src, Some(&mut sent))?;
    Ok((key, sent))
}

/// The tag a counted attempt keeps of the values it sent: `~` and 16 hex digits of their
/// HMAC-SHA256 under the `[keys]` secret (SHA-256 without one), never the values themselves.
pub fn sent_tag(sent: &str, secret: Option<&HashSecret>) -> String {
    use sha2::Digest;
    let mut tag = String::with_capacity(17);
    tag.push('~');
    match secret {
        Some(secret) => tag.push_str(&hash_value(secret, sent.as_bytes())[..16]),
        None => {
            let digest = sha2::Sha256::digest(sent.as_bytes());
            crate::store::layout::push_hex(&mut tag, &digest[..8]);
        }
    }
    tag
}

fn derive(
    spec: &KeySpec,
    on_missing: OnMissingKey,
    src: &KeySource<'_>,
    mut sent: Option<&mut String>,
) -> Result<String, KeyError> {
    let mut key = String::with_capacity(48);
    let mut cache = value::Cache::default();
    for (i, part) in spec.parts.iter().enumerate() {
        if i > 0 {
            key.push('|');
            if let Some(sent) = sent.as_deref_mut() {
                sent.push('|');
            }
        }
        match part_value(part, src, &mut cache, sent.as_deref_mut())? {
            Ok(v) => key.push_str(&v),
            Err(absent) => match on_missing {
                OnMissingKey::Ip => push_fallback(&mut key, src),
                OnMissingKey::Reject => return Err(missing(part, absent)),
            },
        }
    }
    Ok(key)
}

fn part_value(
    spec: &KeyPartSpec,
    src: &KeySource<'_>,
    cache: &mut value::Cache,
    sent: Option<&mut String>,
) -> Result<Result<String, Absent>, KeyError> {
    let raw = match value::read(&spec.part, src, cache) {
        Ok(Some(raw)) => raw,
        Ok(None) => return Ok(Err(Absent::NotSent)),
        Err(ReadError::Unclear { what, .. }) => {
            return Err(KeyError::Unclear {
                part: spec.part.to_string(),
                what,
            })
        }
        Err(ReadError::Ambiguous) => {
            return Err(KeyError::Ambiguous {
                part: spec.part.to_string(),
            })
        }
    };
    if let Some(sent) = sent {
        escape_into(sent, raw.trim_ascii());
    }
    Ok(options::apply(spec, raw, src.hash_secret))
}

/// The error of a part that has no value, saying why.
fn missing(spec: &KeyPartSpec, absent: Absent) -> KeyError {
    let part = spec.part.to_string();
    match absent {
        Absent::NotSent => KeyError::Missing { part },
        Absent::Invalid(what) => KeyError::Invalid { part, what },
    }
}

/// What a key derived from given values needs besides them: the secret of hashed parts, and
/// how `ip` and `path` parts read.
#[derive(Debug, Clone, Copy)]
pub struct ValueContext<'a> {
    /// The `[keys]` secret.
    pub secret: Option<&'a HashSecret>,
    /// `server.ipv6_prefix`.
    pub ipv6_prefix: u8,
    /// `server.path_case`.
    pub path_case: PathCase,
}

/// Why raw part values make no key (`slidegate key`, `/admin/usage?value=`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// Not one value per key part.
    #[error("the key {spec} has {parts} part(s); {given} value(s) given")]
    Count {
        /// The key, as the config writes it.
        spec: String,
        /// Its parts.
        parts: usize,
        /// The values given.
        given: usize,
    },
    /// A value the part cannot read (not an IP, not a phone number, a path with no safe form).
    #[error("`{value}` is {why} (part {part})")]
    Invalid {
        /// The part, as the config writes it.
        part: String,
        /// The value given.
        value: String,
        /// What is wrong with it.
        why: String,
    },
}

/// The derived key of `spec` for raw part values given one per part (`slidegate key`, the
/// admin API's `value=`, plans of hashed keys): each read, normalised, cut, hashed and escaped
/// as a request's would be (a path normalised as the traffic path normalises it; bytes that
/// are not UTF-8 written `%XX`, as a header's would be). An error names the part whose value
/// does not fit it.
pub fn key_of_values(
    spec: &KeySpec,
    values: &[&[u8]],
    ctx: &ValueContext<'_>,
) -> Result<String, ValueError> {
    if values.len() != spec.parts.len() {
        return Err(ValueError::Count {
            spec: spec.to_string(),
            parts: spec.parts.len(),
            given: values.len(),
        });
    }
    let mut key = String::new();
    for (i, (part, value)) in spec.parts.iter().zip(values).enumerate() {
        if i > 0 {
            key.push('|');
        }
        let invalid = |why: String| ValueError::Invalid {
            part: part.part.to_string(),
            value: String::from_utf8_lossy(value).into_owned(),
            why,
        };
        // The parts read from the request line or the peer are text; the others any bytes.
        let text = || std::str::from_utf8(value).map_err(|_| invalid("not UTF-8".into()));
        let raw = match &part.part {
            crate::config::KeyPart::Ip => match text()?.parse::<IpAddr>() {
                Ok(ip) => ip_key(ip, ctx.ipv6_prefix).into_bytes(),
                Err(_) => return Err(invalid("not an IP address".into())),
            },
            crate::config::KeyPart::Method => value::method_value(text()?).into_bytes(),
            crate::config::KeyPart::Path => match crate::path::normalize(text()?) {
                Ok(path) => value::path_value(&path, ctx.path_case).into_bytes(),
                Err(e) => return Err(invalid(format!("no path the gateway takes: {e}"))),
            },
            _ => value.to_vec(),
        };
        match options::apply(part, raw, ctx.secret) {
            Ok(v) => key.push_str(&v),
            Err(Absent::Invalid(what)) => {
                return Err(invalid(format!("not {what}; it would count as missing")))
            }
            Err(Absent::NotSent) => {
                return Err(invalid(
                    "empty once normalised; it would count as missing".into(),
                ))
            }
        }
    }
    Ok(key)
}

/// The value at `path` of a JSON request body (one a JSON `Content-Type` names), read as a key
/// part reads it (a number gives its digits); `Ok(None)` when it is missing or not JSON; `Err`
/// for a member named twice (or in a folded spelling) and for a number parsers read otherwise
/// (a fraction, an exponent, beyond 2^53).
pub fn json_body_value(
    headers: &HeaderMap,
    body: &[u8],
    path: &[String],
) -> Result<Option<Vec<u8>>, ReadError> {
    if body_kind::kind(headers) != Ok(Some(BodyKind::Json)) {
        return Ok(None);
    }
    body::json_value(body, path)
}

/// Appends the client IP as a fallback value: `%ip:203.0.113.7`.
fn push_fallback(key: &mut String, src: &KeySource<'_>) {
    key.push_str("%ip:");
    key.push_str(&ip_key(src.client_ip, src.ipv6_prefix));
}

#[cfg(test)]
mod host_tests;
#[cfg(test)]
mod spelling_tests;
#[cfg(test)]
mod tests;

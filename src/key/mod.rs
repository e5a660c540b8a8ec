//! Rate-limit keys: which parts of a request identify "who" a limit counts, and how their values
//! become the derived key (`203.0.113.7|POST`). Each part's value is read ([`value`]), brought
//! to one spelling and cut or hashed as its options say ([`options`]), then escaped, so that two
//! different tuples of values never give the same key: `%`, `|`, control characters and bytes
//! that are not UTF-8 are written `%XX`, and a part that fell back to the client IP is written
//! `%ip:<address>`, which no escaped value can equal (a `%` is always followed by hex digits).

mod body;
mod client_ip;
mod email;
mod form;
mod jwt;
mod names;
mod options;
mod phone;
mod value;

use std::net::IpAddr;

use http::{HeaderMap, Method};

pub use body::BodyKind;
pub use client_ip::{client_ip, is_trusted, unvouched_forwarding, X_FORWARDED_FOR, X_REAL_IP};
pub use jwt::JwtVerifier;
pub use options::hash_value;
pub use phone::normalize_phone;

use crate::config::{HashSecret, KeyPartSpec, KeySpec, OnMissingKey, PathCase};

/// What a key is derived from: the parts of one request.
pub struct KeySource<'a> {
    /// The matched route's name.
    pub route: &'a str,
    /// The request method.
    pub method: &'a Method,
    /// The request path (normalised, no query).
    pub path: &'a str,
    /// Whether route matching ignores case (then the `path` part is lower-cased).
    pub path_case: PathCase,
    /// The raw query string, if any.
    pub query: Option<&'a str>,
    /// The request headers.
    pub headers: &'a HeaderMap,
    /// The request body, when the route's keys read it.
    pub body: Option<&'a [u8]>,
    /// The client IP after trusted-proxy resolution.
    pub client_ip: IpAddr,
    /// IPv6 clients are keyed by their network of this prefix length.
    pub ipv6_prefix: u8,
    /// The verifier for `jwt:` parts, when `[jwt]` is configured.
    pub jwt: Option<&'a JwtVerifier>,
    /// The secret of `hash = true` parts.
    pub hash_secret: Option<&'a HashSecret>,
}

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

/// Why a part has no value in the key (`on_missing_key` decides what follows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Absent {
    /// The request does not carry it (or nothing is left of it).
    NotSent,
    /// The request carries something that is not a value: what it must be.
    Invalid(&'static str),
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
        Err(value::ReadError::Unclear(what)) => {
            return Err(KeyError::Unclear {
                part: spec.part.to_string(),
                what,
            })
        }
        Err(value::ReadError::Ambiguous) => {
            return Err(KeyError::Ambiguous {
                part: spec.part.to_string(),
            })
        }
    };
    if let Some(sent) = sent {
        sent.push_str(&escape(raw.trim_ascii()));
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
/// as a request's would be (a path normalised as the traffic path normalises it). An error
/// names the part whose value does not fit it.
pub fn key_of_values(
    spec: &KeySpec,
    values: &[&str],
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
            value: value.to_string(),
            why,
        };
        let raw = match &part.part {
            crate::config::KeyPart::Ip => match value.parse::<IpAddr>() {
                Ok(ip) => ip_key(ip, ctx.ipv6_prefix),
                Err(_) => return Err(invalid("not an IP address".into())),
            },
            crate::config::KeyPart::Method => value::method_value(value),
            crate::config::KeyPart::Path => match crate::path::normalize(value) {
                Ok(path) => value::path_value(&path, ctx.path_case),
                Err(e) => return Err(invalid(format!("no path the gateway takes: {e}"))),
            },
            _ => value.to_string(),
        };
        match options::apply(part, raw.into_bytes(), ctx.secret) {
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
/// part reads it (a number gives its digits); `None` when it is missing, ambiguous or not JSON.
pub fn json_body_value(headers: &HeaderMap, body: &[u8], path: &[String]) -> Option<Vec<u8>> {
    if body::kind(headers) != Some(BodyKind::Json) {
        return None;
    }
    body::json_value(body, path).ok().flatten()
}

/// Appends the client IP as a fallback value: `%ip:203.0.113.7`.
fn push_fallback(key: &mut String, src: &KeySource<'_>) {
    key.push_str("%ip:");
    key.push_str(&ip_key(src.client_ip, src.ipv6_prefix));
}

/// Escapes a value for the key: `%`, `|`, control characters and bytes that are not UTF-8
/// become `%XX` (of each byte); everything else stays as it is.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '%' || c == '|' || c.is_control() {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    push_escaped(&mut out, b);
                }
            } else {
                out.push(c);
            }
        }
        for &b in chunk.invalid() {
            push_escaped(&mut out, b);
        }
    }
    out
}

fn push_escaped(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(HEX[(b >> 4) as usize] as char);
    out.push(HEX[(b & 0xf) as usize] as char);
}

/// The `ip` key part: an IPv4 address as it is; an IPv6 address as its network of `prefix` bits
/// (`2001:db8:1:2::/64`), so one host cannot rotate addresses inside its allocation. A /128
/// prefix keys each address on its own, and prints it bare.
pub fn ip_key(ip: IpAddr, prefix: u8) -> String {
    match ip.to_canonical() {
        IpAddr::V6(v6) if prefix < 128 => {
            let net = ipnet::Ipv6Net::new(v6, prefix).map(|n| n.trunc());
            net.map_or_else(|_| v6.to_string(), |n| n.to_string())
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod spelling_tests;
#[cfg(test)]
mod tests;

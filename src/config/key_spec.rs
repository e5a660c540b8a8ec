//! `key = [...]` of a route or a limit: the parts of a request that identify "who" a limit counts
//! (`ip`, `header:NAME`, `query:NAME`, `jwt:CLAIM`, `route`, `method`, `path`, `json:PATH`,
//! `form:NAME`), each with its options (`normalize`, `region`, `prefix`, `hash`). Extracting
//! them from a request is `crate::key`'s job.

use std::fmt;

use http::HeaderName;

use super::settings::named;

/// Where one key part's value comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeyPart {
    /// The client IP (after trusted proxies).
    Ip,
    /// A request header's value.
    Header(HeaderName),
    /// A query parameter's (decoded) value.
    Query(String),
    /// A claim of a verified JWT bearer token.
    Jwt(String),
    /// The route's name: one limit shared by every client.
    Route,
    /// The request method (`GET` for `HEAD`).
    Method,
    /// The request path (normalised; lower-cased while matching ignores case).
    Path,
    /// A member of a JSON body: names (and array indexes) from the top.
    Json(Vec<String>),
    /// A field of an `application/x-www-form-urlencoded` body.
    Form(String),
}

impl KeyPart {
    /// Parses a config key part such as `header:X-Api-Key`.
    pub fn parse(text: &str) -> Result<KeyPart, String> {
        let (kind, arg) = match text.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (text, None),
        };
        match (kind, arg) {
            ("ip", None) => Ok(KeyPart::Ip),
            ("route", None) => Ok(KeyPart::Route),
            ("method", None) => Ok(KeyPart::Method),
            ("path", None) => Ok(KeyPart::Path),
            ("header", Some(name)) => HeaderName::from_bytes(name.trim().as_bytes())
                .map(KeyPart::Header)
                .map_err(|_| format!("`{text}`: `{name}` is not a valid header name")),
            ("query", Some(name)) if !name.is_empty() => Ok(KeyPart::Query(name.to_string())),
            ("jwt", Some(claim)) if !claim.is_empty() => Ok(KeyPart::Jwt(claim.to_string())),
            ("form", Some(name)) if !name.is_empty() => Ok(KeyPart::Form(name.to_string())),
            ("json", Some(path)) => {
                let segments: Vec<String> = path.split('.').map(str::to_string).collect();
                if segments.iter().any(String::is_empty) {
                    return Err(format!(
                        "`{text}`: a JSON path is member names (or array indexes) joined by `.`, like json:user.phone"
                    ));
                }
                Ok(KeyPart::Json(segments))
            }
            _ => Err(format!(
                "unknown key part `{text}`, expected \"ip\", \"header:NAME\", \"query:NAME\", \"jwt:CLAIM\", \"route\", \"method\", \"path\", \"json:PATH\" or \"form:NAME\""
            )),
        }
    }

    /// Whether the value is read from the request body.
    pub fn reads_body(&self) -> bool {
        matches!(self, KeyPart::Json(_) | KeyPart::Form(_))
    }
}

impl fmt::Display for KeyPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyPart::Ip => f.write_str("ip"),
            KeyPart::Header(h) => write!(f, "header:{h}"),
            KeyPart::Query(q) => write!(f, "query:{q}"),
            KeyPart::Jwt(c) => write!(f, "jwt:{c}"),
            KeyPart::Route => f.write_str("route"),
            KeyPart::Method => f.write_str("method"),
            KeyPart::Path => f.write_str("path"),
            KeyPart::Json(p) => write!(f, "json:{}", p.join(".")),
            KeyPart::Form(n) => write!(f, "form:{n}"),
        }
    }
}

named! {
    /// How a part's value is brought to one spelling before it keys a limit.
    pub enum Normalize {
        /// E.164 by libphonenumber's rules (`+6281234567890`).
        Phone = "phone",
        /// A bare address only: trimmed, lower-cased, `+tag` dropped, the domain in ASCII.
        Email = "email",
        /// Trimmed and lower-cased.
        Lower = "lower",
        /// The token of a `Bearer` credential (`Authorization: Bearer <token>`): the scheme in any
        /// case, the spaces around the token dropped; anything else is not one.
        Bearer = "bearer",
    }
}

/// One part of a key with its options.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyPartSpec {
    /// Where the value comes from.
    pub part: KeyPart,
    /// How it is normalised.
    pub normalize: Option<Normalize>,
    /// The region national phone numbers are read in (`normalize = "phone"`).
    pub region: Option<phonenumber::country::Id>,
    /// Only the first this many characters of the (normalised) value count.
    pub prefix: Option<usize>,
    /// The value is replaced by 16 bytes of its HMAC-SHA256 under the `[keys]` secret, in hex.
    pub hash: bool,
}

impl KeyPartSpec {
    /// A part with no options.
    pub fn plain(part: KeyPart) -> KeyPartSpec {
        KeyPartSpec {
            part,
            normalize: None,
            region: None,
            prefix: None,
            hash: false,
        }
    }

    /// Whether the value goes through any option.
    pub fn transforms(&self) -> bool {
        self.normalize.is_some() || self.prefix.is_some() || self.hash
    }
}

impl fmt::Display for KeyPartSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.transforms() {
            return write!(f, "{}", self.part);
        }
        write!(f, "{{ part = \"{}\"", self.part)?;
        if let Some(n) = self.normalize {
            write!(f, ", normalize = \"{}\"", n.name())?;
        }
        if let Some(r) = &self.region {
            write!(f, ", region = \"{}\"", r.as_ref())?;
        }
        if let Some(p) = self.prefix {
            write!(f, ", prefix = {p}")?;
        }
        if self.hash {
            f.write_str(", hash = true")?;
        }
        f.write_str(" }")
    }
}

/// A whole key: its parts in order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeySpec {
    /// The parts, joined with `|` in this order.
    pub parts: Vec<KeyPartSpec>,
}

impl KeySpec {
    /// A key of plain parts.
    pub fn of(parts: impl IntoIterator<Item = KeyPart>) -> KeySpec {
        KeySpec {
            parts: parts.into_iter().map(KeyPartSpec::plain).collect(),
        }
    }

    /// Whether any part reads the request body.
    pub fn reads_body(&self) -> bool {
        self.parts.iter().any(|p| p.part.reads_body())
    }

    /// The first part that counts several values the upstream may keep apart as one (`email`
    /// drops `+tags`, `lower` folds case, `prefix` takes a whole range): a success of one of
    /// them must not forgive the others. (Spellings of one phone number are one number.)
    pub fn merging_part(&self) -> Option<&KeyPartSpec> {
        self.parts.iter().find(|p| {
            matches!(p.normalize, Some(Normalize::Email | Normalize::Lower)) || p.prefix.is_some()
        })
    }

    /// Whether any part is hashed.
    pub fn hashes(&self) -> bool {
        self.parts.iter().any(|p| p.hash)
    }
}

impl fmt::Display for KeySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, p) in self.parts.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            if p.transforms() {
                write!(f, "{p}")?;
            } else {
                write!(f, "\"{p}\"")?;
            }
        }
        f.write_str("]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_parts_parse_and_print_back() {
        for text in [
            "ip",
            "header:x-api-key",
            "query:user",
            "jwt:sub",
            "route",
            "method",
            "path",
            "json:user.phone",
            "json:to.0",
            "form:username",
        ] {
            assert_eq!(KeyPart::parse(text).unwrap().to_string(), text);
        }
        assert!(KeyPart::parse("cookie:x").is_err());
        assert!(KeyPart::parse("header:bad header").is_err());
        assert!(KeyPart::parse("json:a..b").is_err());
        assert!(KeyPart::parse("json:").is_err());
    }
}

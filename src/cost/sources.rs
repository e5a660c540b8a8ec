//! Where an answer states what its attempt cost ([`CostFrom`]) and what an attempt holds until
//! then ([`Reserve`]), as a route's `cost_from` and `cost` spell them.

use std::fmt;
use std::sync::Arc;

use http::HeaderName;

use super::sse::EventPath;

/// The body bytes a `json:` reader reads at most (and an `sse:` reader per event) unless a
/// route says otherwise.
pub const DEFAULT_MAX_COST_BODY_BYTES: usize = 1024 * 1024;

/// Where an answer states what its attempt cost (`cost_from`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CostFrom {
    /// A response header holding a whole number (`header:X-Usage-Tokens`).
    Header(HeaderName),
    /// A member of the JSON body (`json:usage.total_tokens`).
    Json(Arc<[String]>),
    /// A member of the last server-sent event whose data carries it
    /// (`sse:usage.total_tokens`); an answer that is not an event stream is read as `json:`.
    Sse(EventPath),
}

impl CostFrom {
    /// Parses `header:NAME`, `json:PATH` or `sse:PATH`.
    pub fn parse(text: &str) -> Result<CostFrom, String> {
        match text.split_once(':') {
            Some(("header", name)) => HeaderName::from_bytes(name.trim().as_bytes())
                .map(CostFrom::Header)
                .map_err(|_| format!("`{text}`: `{name}` is not a valid header name")),
            Some(("json", path)) => json_path(text, path).map(CostFrom::Json),
            Some(("sse", path)) => json_path(text, path).map(|p| CostFrom::Sse(EventPath::new(p))),
            _ => Err(format!(
                "unknown cost source `{text}`, expected \"header:NAME\", \"json:PATH\" or \"sse:PATH\""
            )),
        }
    }

    /// Whether the body is read for it (not a header).
    pub fn reads_body(&self) -> bool {
        !matches!(self, CostFrom::Header(_))
    }
}

impl fmt::Display for CostFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CostFrom::Header(h) => write!(f, "header:{h}"),
            CostFrom::Json(p) => write!(f, "json:{}", p.join(".")),
            CostFrom::Sse(p) => write!(f, "sse:{}", p.steps().join(".")),
        }
    }
}

/// What an attempt holds until its answer states its cost (`cost`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Reserve {
    /// A fixed number of units (1 when the limit does not say).
    Units(u64),
    /// A whole number read from the JSON request body (`json:max_tokens`); 1 when the body
    /// states none.
    Json(Arc<[String]>),
}

impl Reserve {
    /// Parses `"json:PATH"` (a number is [`Reserve::Units`] already).
    pub fn parse(text: &str) -> Result<Reserve, String> {
        match text.split_once(':') {
            Some(("json", path)) => json_path(text, path).map(Reserve::Json),
            _ => Err(format!(
                "`{text}`: cost is a whole number or \"json:PATH\" (a member of the request body, like json:max_tokens)"
            )),
        }
    }

    /// Whether the request body is read for it.
    pub fn reads_body(&self) -> bool {
        matches!(self, Reserve::Json(_))
    }
}

impl fmt::Display for Reserve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reserve::Units(n) => write!(f, "{n}"),
            Reserve::Json(p) => write!(f, "json:{}", p.join(".")),
        }
    }
}

/// A JSON path: member names (or array indexes) joined by `.`.
fn json_path(text: &str, path: &str) -> Result<Arc<[String]>, String> {
    let segments: Vec<String> = path.split('.').map(str::to_string).collect();
    if segments.iter().any(String::is_empty) {
        return Err(format!(
            "`{text}`: a JSON path is member names (or array indexes) joined by `.`, like usage.total_tokens"
        ));
    }
    Ok(segments.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_and_print_as_written() {
        for text in [
            "header:x-usage-tokens",
            "json:usage.total_tokens",
            "sse:a.0.b",
        ] {
            assert_eq!(CostFrom::parse(text).unwrap().to_string(), text);
        }
        assert!(CostFrom::parse("body:x").is_err());
        assert!(CostFrom::parse("json:a..b").is_err());
        assert!(CostFrom::parse("header:bad header").is_err());
        assert_eq!(
            Reserve::parse("json:max_tokens").unwrap(),
            Reserve::Json(vec!["max_tokens".to_string()].into())
        );
        assert!(Reserve::parse("header:x").is_err());
    }
}

/// A request whose stated cost (its `json:` reservation) is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CostOutOfRange {
    /// A cost below 1, or above the smallest limit it is charged against: it could never be
    /// allowed.
    #[error("the request's cost {cost} is out of range: 1 to {most}, the smallest limit it is charged against")]
    Range {
        /// The cost the request stated, as written.
        cost: String,
        /// The smallest limit it is charged against.
        most: u64,
    },
    /// The member stating it is named twice (or in a spelling some framework folds into its
    /// name): which copy the upstream reads is unclear.
    #[error("`{path}` is named more than once in the request body (or in a spelling some framework folds into it): the cost the upstream reads is unclear")]
    Ambiguous {
        /// The member's path.
        path: String,
    },
}

//! How Envoy's route table picks a route for a path, as the recipes' bootstraps write it: an
//! exact `path`, a `prefix` (either ignoring case when `case_sensitive: false`), or a
//! `safe_regex` that must match the whole path (RE2 syntax; the recipes use what Rust's regex
//! reads alike). The path is the one Envoy routes: normalised, without its query.

use saphyr::Yaml;

/// One route's `match`.
pub enum EnvoyMatch {
    /// `path`: the whole path.
    Exact { path: String, case_sensitive: bool },
    /// `prefix`: the path's beginning.
    Prefix {
        prefix: String,
        case_sensitive: bool,
    },
    /// `safe_regex`: the whole path matches the pattern.
    Regex(regex::Regex),
}

impl EnvoyMatch {
    /// The `match` of a route of the bootstrap.
    pub fn of(m: &Yaml<'_>) -> EnvoyMatch {
        let case_sensitive = !m.contains_mapping_key("case_sensitive")
            || m["case_sensitive"].as_bool() != Some(false);
        let text = |y: &Yaml<'_>| y.as_str().expect("a string").to_string();
        if m.contains_mapping_key("path") {
            return EnvoyMatch::Exact {
                path: text(&m["path"]),
                case_sensitive,
            };
        }
        if m.contains_mapping_key("prefix") {
            return EnvoyMatch::Prefix {
                prefix: text(&m["prefix"]),
                case_sensitive,
            };
        }
        let pattern = text(&m["safe_regex"]["regex"]);
        EnvoyMatch::Regex(regex::Regex::new(&format!("^(?:{pattern})$")).expect("a regex"))
    }

    /// Whether the route takes `path` (normalised, no query).
    pub fn takes(&self, path: &str) -> bool {
        let fold = |sensitive: bool, s: &str| match sensitive {
            true => s.to_string(),
            false => s.to_lowercase(),
        };
        match self {
            EnvoyMatch::Exact {
                path: want,
                case_sensitive,
            } => fold(*case_sensitive, path) == fold(*case_sensitive, want),
            EnvoyMatch::Prefix {
                prefix,
                case_sensitive,
            } => fold(*case_sensitive, path).starts_with(&fold(*case_sensitive, prefix)),
            EnvoyMatch::Regex(pattern) => pattern.is_match(path),
        }
    }
}

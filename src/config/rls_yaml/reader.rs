//! What every part of a limit file is read with: the [`Reader`] of one file (its places,
//! errors and warnings, its mappings and scalars), the keys each part takes, and the bounds
//! on names, windows and depth.

use std::collections::HashMap;
use std::time::Duration;

use saphyr::{MarkedYaml, Marker, Scalar, YamlData};

use crate::config::{ConfigError, ConfigWarning, Location};

/// The most entries a request descriptor may have, so the deepest level a tree may have.
pub const MAX_DESCRIPTOR_ENTRIES: usize = 16;
/// The longest `name` (and label) of a rate limit.
pub(super) const MAX_NAME_LEN: usize = 128;
/// The longest window, as in the TOML: 366 days.
pub(super) const MAX_WINDOW: Duration = Duration::from_secs(366 * 24 * 3600);

pub(super) type Result<T> = std::result::Result<T, ConfigError>;

/// The keys a descriptor takes.
pub(super) const DESCRIPTOR_KEYS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "share_threshold",
    "detailed_metric",
    "value_to_metric",
    "quota_mode",
    "metadata",
];
/// The keys a `rate_limit` takes.
pub(super) const RATE_LIMIT_KEYS: &[&str] = &[
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    "window",
    "algorithm",
];

/// One file being read.
pub(super) struct Reader<'w> {
    pub(super) file: String,
    pub(super) warnings: &'w mut Vec<ConfigWarning>,
}

/// A `replaces` entry, kept with its place until every name of the domain is known (in
/// every file of the domain).
pub(super) struct Replacing {
    pub(super) name: String,
    pub(super) at: Location,
}

/// A rule's label and where it was set, to find two rules showing under one name.
pub(super) struct Labelled {
    pub(super) label: String,
    /// An unnamed rule's descriptor keys joined by `.`, its label when no other takes it.
    pub(super) keys: Option<String>,
    /// Its index among the domain's rules.
    pub(super) rule: usize,
    pub(super) at: Location,
}

impl Reader<'_> {
    pub(super) fn at(&self, m: Marker) -> Location {
        Location {
            file: self.file.clone(),
            line: m.line(),
            column: m.col() + 1,
        }
    }

    pub(super) fn error<T>(&self, m: Marker, message: impl Into<String>) -> Result<T> {
        Err(ConfigError::Invalid {
            at: self.at(m),
            message: message.into(),
        })
    }

    pub(super) fn warn(&mut self, m: Marker, message: impl Into<String>) {
        let at = self.at(m);
        self.warnings.push(ConfigWarning {
            at,
            message: message.into(),
        });
    }
    /// The fields of a mapping, each key one of `known`.
    pub(super) fn mapping<'n, 'i>(
        &self,
        node: &'n MarkedYaml<'i>,
        what: &str,
        known: &[&str],
    ) -> Result<HashMap<String, &'n MarkedYaml<'i>>> {
        let YamlData::Mapping(map) = &node.data else {
            return self.error(node.span.start, format!("{what}: expected a mapping"));
        };
        let mut fields = HashMap::with_capacity(map.len());
        for (k, v) in map.iter() {
            let name = match &k.data {
                YamlData::Value(Scalar::String(s)) => s.to_string(),
                _ => return self.error(k.span.start, format!("{what}: a key that is not a name")),
            };
            if !known.contains(&name.as_str()) {
                return self.error(
                    k.span.start,
                    format!(
                        "{what}: unknown key `{name}`, expected one of {}",
                        known.join(", ")
                    ),
                );
            }
            fields.insert(name, v);
        }
        Ok(fields)
    }

    /// A scalar as text: a string, or a number or boolean as written.
    pub(super) fn string(&self, node: &MarkedYaml<'_>, what: &str) -> Result<String> {
        match &node.data {
            YamlData::Value(Scalar::String(s)) => Ok(s.to_string()),
            YamlData::Value(Scalar::Integer(n)) => Ok(n.to_string()),
            YamlData::Value(Scalar::Boolean(b)) => Ok(b.to_string()),
            _ => self.error(node.span.start, format!("{what}: expected a string")),
        }
    }

    /// A boolean field (false when absent).
    pub(super) fn flag(
        &self,
        fields: &HashMap<String, &MarkedYaml<'_>>,
        name: &str,
    ) -> Result<bool> {
        match fields.get(name).map(|n| (n, &n.data)) {
            None => Ok(false),
            Some((_, YamlData::Value(Scalar::Boolean(b)))) => Ok(*b),
            Some((n, _)) => self.error(n.span.start, format!("{name}: expected true or false")),
        }
    }
}

/// Whether `text` can name a limit in a header's quoted string and a metric label.
pub(super) fn is_label(text: &str) -> bool {
    text.len() <= MAX_NAME_LEN
        && text
            .bytes()
            .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

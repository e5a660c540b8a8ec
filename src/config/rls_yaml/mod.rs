//! The limit files of `[rls] config`, in envoyproxy/ratelimit's YAML format: one domain per
//! file, a file or a directory of `*.yaml`/`*.yml` files (read in name order). Every error
//! points at `FILE:LINE:COLUMN` of the value at fault, as the TOML's do.
//!
//! Differences from envoyproxy/ratelimit's loader: a `replaces` that names no rate limit of
//! its domain, two rate limits of one domain showing under one name, and a level nested deeper
//! than a request descriptor may be are errors (each would silently do nothing there);
//! `window` and `algorithm` are slidegate's; `detailed_metric`, `value_to_metric` and
//! `metadata` are accepted with a warning: metric labels never carry request values here.
//! Files sharing a domain are refused unless `[rls] merge_domains = true` (envoyproxy/ratelimit's
//! `MERGE_DOMAIN_CONFIG`): then their first levels are merged into one tree.
//!
//! This file reads the files and holds what every part of a file is read with; `tree.rs` reads
//! a domain and its levels of descriptors, `rule.rs` a `rate_limit`.

mod rule;
mod tree;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use saphyr::{MarkedYaml, Marker, Scalar, YamlData};

use super::rls::RlsDomain;
use super::{ConfigError, ConfigWarning, Location};

/// The most entries a request descriptor may have, so the deepest level a tree may have.
pub const MAX_DESCRIPTOR_ENTRIES: usize = 16;
/// The longest `name` (and label) of a rate limit.
const MAX_NAME_LEN: usize = 128;
/// The longest window, as in the TOML: 366 days.
const MAX_WINDOW: Duration = Duration::from_secs(366 * 24 * 3600);

/// What the files hold: the domains, and the warnings about settings without effect.
pub struct Loaded {
    /// The domains, in the order read.
    pub domains: Vec<Arc<RlsDomain>>,
    /// Accepted settings that do nothing here.
    pub warnings: Vec<ConfigWarning>,
}

/// Reads every limit file of `source` (a file, or a directory of YAML files).
/// With `merge_domains`, files of one domain are merged (their first levels side by side).
pub fn load(source: &Path, merge_domains: bool) -> Result<Loaded> {
    let mut loaded = Loaded {
        domains: Vec::new(),
        warnings: Vec::new(),
    };
    let mut read: Vec<tree::DomainParts> = Vec::new();
    for file in yaml_files(source)? {
        let shown = file.display().to_string();
        let text = std::fs::read_to_string(&file).map_err(|source| ConfigError::Read {
            file: shown.clone(),
            source,
        })?;
        let mut reader = Reader {
            file: shown,
            warnings: &mut loaded.warnings,
        };
        let parts = reader.domain(&text)?;
        match read.iter_mut().find(|d| d.name == parts.name) {
            Some(first) if merge_domains => first.merge(parts)?,
            Some(first) => {
                return Err(ConfigError::Invalid {
                    at: parts.at,
                    message: format!(
                        "domain: duplicate domain `{}` (also at {}): a domain is one file, unless [rls] merge_domains = true",
                        parts.name, first.at
                    ),
                })
            }
            None => read.push(parts),
        }
    }
    for parts in read {
        loaded.domains.push(Arc::new(parts.finish()?));
    }
    Ok(loaded)
}

/// `source` itself, or the YAML files of the directory `source` in name order (not those whose
/// name starts with `.`: a Kubernetes ConfigMap's `..data` and its timestamped directories).
pub fn yaml_files(source: &Path) -> Result<Vec<PathBuf>> {
    let unreadable = |e: std::io::Error| ConfigError::Read {
        file: source.display().to_string(),
        source: e,
    };
    if !std::fs::metadata(source).map_err(unreadable)?.is_dir() {
        return Ok(vec![source.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(source)
        .map_err(unreadable)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            !name.starts_with('.')
                && (name.ends_with(".yaml") || name.ends_with(".yml"))
                && p.is_file()
        })
        .collect();
    files.sort();
    Ok(files)
}

type Result<T> = std::result::Result<T, ConfigError>;

/// The keys a descriptor takes.
const DESCRIPTOR_KEYS: &[&str] = &[
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
const RATE_LIMIT_KEYS: &[&str] = &[
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    "window",
    "algorithm",
];

/// One file being read.
struct Reader<'w> {
    file: String,
    warnings: &'w mut Vec<ConfigWarning>,
}

/// A `replaces` entry, kept with its place until every name of the domain is known (in
/// every file of the domain).
struct Replacing {
    name: String,
    at: Location,
}

/// A rule's label and where it was set, to find two rules showing under one name.
struct Labelled {
    label: String,
    /// An unnamed rule's descriptor keys joined by `.`, its label when no other takes it.
    keys: Option<String>,
    /// Its index among the domain's rules.
    rule: usize,
    at: Location,
}

impl Reader<'_> {
    fn at(&self, m: Marker) -> Location {
        Location {
            file: self.file.clone(),
            line: m.line(),
            column: m.col() + 1,
        }
    }

    fn error<T>(&self, m: Marker, message: impl Into<String>) -> Result<T> {
        Err(ConfigError::Invalid {
            at: self.at(m),
            message: message.into(),
        })
    }

    fn warn(&mut self, m: Marker, message: impl Into<String>) {
        let at = self.at(m);
        self.warnings.push(ConfigWarning {
            at,
            message: message.into(),
        });
    }
    /// The fields of a mapping, each key one of `known`.
    fn mapping<'n, 'i>(
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
    fn string(&self, node: &MarkedYaml<'_>, what: &str) -> Result<String> {
        match &node.data {
            YamlData::Value(Scalar::String(s)) => Ok(s.to_string()),
            YamlData::Value(Scalar::Integer(n)) => Ok(n.to_string()),
            YamlData::Value(Scalar::Boolean(b)) => Ok(b.to_string()),
            _ => self.error(node.span.start, format!("{what}: expected a string")),
        }
    }

    /// A boolean field (false when absent).
    fn flag(&self, fields: &HashMap<String, &MarkedYaml<'_>>, name: &str) -> Result<bool> {
        match fields.get(name).map(|n| (n, &n.data)) {
            None => Ok(false),
            Some((_, YamlData::Value(Scalar::Boolean(b)))) => Ok(*b),
            Some((n, _)) => self.error(n.span.start, format!("{name}: expected true or false")),
        }
    }
}

/// Whether `text` can name a limit in a header's quoted string and a metric label.
fn is_label(text: &str) -> bool {
    text.len() <= MAX_NAME_LEN
        && text
            .bytes()
            .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

//! The limit files of `[rls] config`, in envoyproxy/ratelimit's YAML format: one domain per
//! file, a file or a directory of `*.yaml`/`*.yml` files (read in name order). Every error
//! points at `FILE:LINE:COLUMN` of the value at fault, as the TOML's do.
//!
//! Differences from envoyproxy/ratelimit's loader: a `replaces` that names no rate limit of
//! its domain, two rate limits of one domain showing under one name, and a level nested deeper
//! than a request descriptor may be are errors (each would silently do nothing there);
//! `window` and `algorithm` are slidegate's; `quota_mode` is refused (not supported), and
//! `detailed_metric`, `value_to_metric` and `metadata` are accepted with a warning: metric
//! labels never carry request values here.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use saphyr::{LoadableYamlNode, MarkedYaml, Marker, Scalar, YamlData};

use super::rls::{RlsDescriptor, RlsDomain, RlsRule, RlsUnit};
use super::{ConfigError, ConfigWarning, Location};
use crate::algorithm::AlgorithmId;

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
pub fn load(source: &Path) -> Result<Loaded> {
    let mut loaded = Loaded {
        domains: Vec::new(),
        warnings: Vec::new(),
    };
    let mut seen: HashMap<String, Location> = HashMap::new();
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
        let (domain, at) = reader.domain(&text)?;
        if let Some(first) = seen.get(&domain.name) {
            return Err(ConfigError::Invalid {
                at,
                message: format!(
                    "domain: duplicate domain `{}` (also at {first}): a domain is one file",
                    domain.name
                ),
            });
        }
        seen.insert(domain.name.clone(), at);
        loaded.domains.push(Arc::new(domain));
    }
    Ok(loaded)
}

/// `source` itself, or the YAML files of the directory `source` in name order.
fn yaml_files(source: &Path) -> Result<Vec<PathBuf>> {
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

/// A `replaces` entry, kept with its place until every name of the domain is known.
struct Replacing {
    name: String,
    at: Marker,
}

/// A rule's label and where it was set, to find two rules showing under one name.
struct Labelled {
    label: String,
    at: Marker,
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

    /// The file's domain, and where its name is written.
    fn domain(&mut self, text: &str) -> Result<(RlsDomain, Location)> {
        let docs = MarkedYaml::load_from_str(text).map_err(|e| ConfigError::Invalid {
            at: self.at(*e.marker()),
            message: format!("not valid YAML: {}", e.info()),
        })?;
        let Some(root) = docs.first() else {
            return self.error(
                Marker::new(0, 1, 0),
                "empty file: expected `domain` and `descriptors`",
            );
        };
        if let Some(second) = docs.get(1) {
            return self.error(
                second.span.start,
                "a second YAML document: one file holds one domain",
            );
        }
        let fields = self.mapping(root, "the file", &["domain", "descriptors"])?;
        let Some(name_node) = fields.get("domain") else {
            return self.error(root.span.start, "missing `domain`");
        };
        let name = self.string(name_node, "domain")?;
        let valid = name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:/".contains(&b));
        if name.is_empty() || !valid {
            // It names the domain's metrics and sits in the hash tag of its Redis keys.
            return self.error(
                name_node.span.start,
                format!("domain: `{name}` must be 1-64 characters of letters, digits, `-`, `_`, `.`, `:` or `/`"),
            );
        }
        let mut rules = Vec::new();
        let mut replacing = Vec::new();
        let mut labels = Vec::new();
        let descriptors = match fields.get("descriptors") {
            Some(list) => self.level(list, "", 1, &mut rules, &mut replacing, &mut labels)?,
            None => Vec::new(),
        };
        self.check_names(&rules, &replacing, &labels)?;
        let at = self.at(name_node.span.start);
        Ok((
            RlsDomain {
                name,
                descriptors,
                rules,
            },
            at,
        ))
    }

    /// Every `replaces` names a rate limit of the domain, and no two rate limits show under
    /// one label (metrics and `/admin/usage` pick a limit by it).
    fn check_names(
        &self,
        rules: &[RlsRule],
        replacing: &[Replacing],
        labels: &[Labelled],
    ) -> Result<()> {
        let names: HashSet<&str> = rules.iter().filter_map(|r| r.name.as_deref()).collect();
        for r in replacing {
            if !names.contains(r.name.as_str()) {
                return self.error(
                    r.at,
                    format!(
                        "replaces: no rate_limit of this domain is named `{}`",
                        r.name
                    ),
                );
            }
        }
        let mut seen: HashSet<&str> = HashSet::new();
        for l in labels {
            if !seen.insert(l.label.as_str()) {
                return self.error(
                    l.at,
                    format!(
                        "rate_limit: two rate limits of this domain are called `{}`: give each a `name` of its own",
                        l.label
                    ),
                );
            }
        }
        Ok(())
    }

    /// One level of descriptors below `path`.
    fn level(
        &mut self,
        node: &MarkedYaml<'_>,
        path: &str,
        depth: usize,
        rules: &mut Vec<RlsRule>,
        replacing: &mut Vec<Replacing>,
        labels: &mut Vec<Labelled>,
    ) -> Result<Vec<RlsDescriptor>> {
        let YamlData::Sequence(items) = &node.data else {
            return self.error(
                node.span.start,
                "descriptors: expected a list of descriptors",
            );
        };
        if depth > MAX_DESCRIPTOR_ENTRIES && !items.is_empty() {
            return self.error(
                node.span.start,
                format!("descriptors: nested deeper than {MAX_DESCRIPTOR_ENTRIES} levels, more entries than a request descriptor may have"),
            );
        }
        let mut seen: HashSet<(String, Option<String>)> = HashSet::new();
        let mut level = Vec::with_capacity(items.len());
        for item in items {
            let fields = self.mapping(item, "a descriptor", DESCRIPTOR_KEYS)?;
            let Some(key_node) = fields.get("key") else {
                return self.error(item.span.start, "descriptor: missing `key`");
            };
            let key = self.string(key_node, "key")?;
            if key.is_empty() {
                return self.error(key_node.span.start, "key: must not be empty");
            }
            let value = match fields.get("value") {
                Some(v) => Some(self.string(v, "value")?),
                None => None,
            };
            let composite = match &value {
                Some(v) => format!("{key}_{v}"),
                None => key.clone(),
            };
            if !seen.insert((key.clone(), value.clone())) {
                return self.error(
                    key_node.span.start,
                    format!("descriptor: duplicate `{composite}` at this level (the same key and value twice)"),
                );
            }
            let here = match path {
                "" => composite.clone(),
                _ => format!("{path}.{composite}"),
            };
            let shadow = self.flag(&fields, "shadow_mode")?;
            let share_threshold = self.flag(&fields, "share_threshold")?;
            if share_threshold && !value.as_deref().is_some_and(|v| v.contains('*')) {
                return self.error(
                    fields["share_threshold"].span.start,
                    format!("share_threshold: only a wildcard value (with `*`) can share its threshold, `{composite}` has none"),
                );
            }
            self.without_effect(&fields)?;
            let rule = match fields.get("rate_limit") {
                Some(r) => {
                    let rule = self.rule(r, &here, shadow, replacing)?;
                    labels.push(Labelled {
                        label: rule.label.clone(),
                        at: r.span.start,
                    });
                    rules.push(rule);
                    Some(rules.len() - 1)
                }
                None => None,
            };
            let descriptors = match fields.get("descriptors") {
                Some(list) => self.level(list, &here, depth + 1, rules, replacing, labels)?,
                None => Vec::new(),
            };
            level.push(RlsDescriptor {
                key,
                value,
                share_threshold,
                rule,
                descriptors,
            });
        }
        Ok(level)
    }

    /// Settings of envoyproxy/ratelimit that change nothing here (warned about), or that it
    /// does not do (refused).
    fn without_effect(&mut self, fields: &HashMap<String, &MarkedYaml<'_>>) -> Result<()> {
        for name in ["detailed_metric", "value_to_metric"] {
            if self.flag(fields, name)? {
                self.warn(
                    fields[name].span.start,
                    format!("{name} has no effect: metric labels never carry request values (the rate limit's name, or its descriptor keys, is its `limit` label)"),
                );
            }
        }
        if self.flag(fields, "quota_mode")? {
            return self.error(
                fields["quota_mode"].span.start,
                "quota_mode: not supported; every descriptor's limit is enforced",
            );
        }
        if let Some(m) = fields.get("metadata") {
            self.warn(
                m.span.start,
                "metadata is ignored: answers carry no dynamic metadata",
            );
        }
        Ok(())
    }

    /// A `rate_limit` of the node at `path`.
    fn rule(
        &mut self,
        node: &MarkedYaml<'_>,
        path: &str,
        shadow: bool,
        replacing: &mut Vec<Replacing>,
    ) -> Result<RlsRule> {
        let fields = self.mapping(node, "rate_limit", RATE_LIMIT_KEYS)?;
        let unlimited = self.flag(&fields, "unlimited")?;
        let name = match fields.get("name") {
            Some(n) => Some(self.rule_name(n)?),
            None => None,
        };
        let replaces = match fields.get("replaces") {
            Some(r) => self.replaces(r, name.as_deref(), replacing)?,
            None => Vec::new(),
        };
        let label = match &name {
            Some(n) => n.clone(),
            None => {
                if !is_label(path) {
                    return self.error(
                        node.span.start,
                        format!("rate_limit: `{path}` cannot name this limit in headers and metrics (printable ASCII without `\"` or `\\`, at most {MAX_NAME_LEN} characters): give it a `name`"),
                    );
                }
                path.to_string()
            }
        };
        let (unit, window) = self.window(node, &fields, unlimited)?;
        let algorithm = match fields.get("algorithm") {
            Some(a) => {
                let text = self.string(a, "algorithm")?;
                let Some(id) = AlgorithmId::by_name(&text) else {
                    let names: Vec<&str> = AlgorithmId::all().map(|a| a.name()).collect();
                    return self.error(
                        a.span.start,
                        format!(
                            "algorithm: unknown algorithm `{text}`, expected one of {}",
                            names.join(", ")
                        ),
                    );
                };
                id
            }
            None => AlgorithmId::SLIDING_LOG,
        };
        let limit = match fields.get("requests_per_unit") {
            Some(n) => self.requests_per_unit(n)?,
            None if unlimited => 0,
            None => return self.error(node.span.start, "rate_limit: missing `requests_per_unit`"),
        };
        if !unlimited && limit > 0 {
            if let Err(why) = algorithm
                .get()
                .check(limit, window.as_micros() as u64, None)
            {
                let at = fields["requests_per_unit"].span.start;
                // The bound's advice, in this file's syntax.
                let why = why.replace("algorithm = ", "algorithm: ").replace('"', "");
                return self.error(at, format!("requests_per_unit: {why}"));
            }
        }
        Ok(RlsRule {
            label,
            name,
            unlimited,
            limit,
            window,
            unit,
            algorithm,
            replaces,
            shadow,
            path: path.to_string(),
        })
    }

    /// `unit` or `window` (exactly one, unless the limit is unlimited: then neither).
    fn window(
        &self,
        node: &MarkedYaml<'_>,
        fields: &HashMap<String, &MarkedYaml<'_>>,
        unlimited: bool,
    ) -> Result<(Option<RlsUnit>, Duration)> {
        match (fields.get("unit"), fields.get("window")) {
            (Some(u), _) if unlimited => {
                self.error(u.span.start, "unit: an unlimited rate_limit has no unit")
            }
            (_, Some(w)) if unlimited => {
                self.error(w.span.start, "window: an unlimited rate_limit has no window")
            }
            (None, None) if unlimited => Ok((None, Duration::ZERO)),
            (Some(_), Some(w)) => self.error(
                w.span.start,
                "window: give either `unit` or `window`, not both",
            ),
            (Some(u), None) => {
                let text = self.string(u, "unit")?;
                let lower = text.to_ascii_lowercase();
                match RlsUnit::NAMES.iter().find(|(n, _)| *n == lower) {
                    Some(&(_, unit)) => Ok((Some(unit), unit.window())),
                    None => {
                        let names: Vec<&str> = RlsUnit::NAMES.iter().map(|(n, _)| *n).collect();
                        self.error(
                            u.span.start,
                            format!(
                                "unit: unknown unit `{text}`, expected one of {} (or slidegate's `window`, like \"10m\")",
                                names.join(", ")
                            ),
                        )
                    }
                }
            }
            (None, Some(w)) => {
                let text = self.string(w, "window")?;
                let window = match super::duration::parse(&text) {
                    Ok(d) => d,
                    Err(e) => {
                        return self.error(
                            w.span.start,
                            format!("window: `{text}` is not a duration: {e}; write it like \"250ms\", \"10m\", \"1h\", \"7d\""),
                        )
                    }
                };
                if window < Duration::from_millis(1) || window > MAX_WINDOW {
                    return self.error(
                        w.span.start,
                        format!("window: must be between 1ms and 366d, got {text}"),
                    );
                }
                Ok((None, window))
            }
            (None, None) => self.error(
                node.span.start,
                "rate_limit: missing `unit` (second, minute, hour, day, week, month, year) or `window`",
            ),
        }
    }

    fn requests_per_unit(&self, node: &MarkedYaml<'_>) -> Result<u64> {
        match &node.data {
            YamlData::Value(Scalar::Integer(n)) if (0..=u32::MAX as i64).contains(n) => {
                Ok(*n as u64)
            }
            _ => self.error(
                node.span.start,
                format!(
                    "requests_per_unit: expected a whole number from 0 to {}",
                    u32::MAX
                ),
            ),
        }
    }

    fn rule_name(&self, node: &MarkedYaml<'_>) -> Result<String> {
        let name = self.string(node, "name")?;
        if !is_label(&name) || name.is_empty() {
            return self.error(
                node.span.start,
                format!("name: `{name}` must be 1-{MAX_NAME_LEN} printable ASCII characters without `\"` or `\\`"),
            );
        }
        Ok(name)
    }

    /// `replaces: [{name: X}, ...]`
    fn replaces(
        &self,
        node: &MarkedYaml<'_>,
        own: Option<&str>,
        replacing: &mut Vec<Replacing>,
    ) -> Result<Vec<String>> {
        let YamlData::Sequence(items) = &node.data else {
            return self.error(
                node.span.start,
                "replaces: expected a list of `- name: ...`",
            );
        };
        let mut names = Vec::with_capacity(items.len());
        for item in items {
            let fields = self.mapping(item, "a replaces entry", &["name"])?;
            let Some(n) = fields.get("name") else {
                return self.error(item.span.start, "replaces: an entry without `name`");
            };
            let name = self.string(n, "replaces name")?;
            if name.is_empty() {
                return self.error(n.span.start, "replaces: an empty name");
            }
            if own == Some(name.as_str()) {
                return self.error(
                    n.span.start,
                    format!("replaces: `{name}` is this rate limit's own name"),
                );
            }
            replacing.push(Replacing {
                name: name.clone(),
                at: n.span.start,
            });
            names.push(name);
        }
        Ok(names)
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

//! A file's domain and its descriptor tree, level by level: keys and values, duplicates at one
//! level, `shadow_mode`, `quota_mode` and `share_threshold`, the settings of envoyproxy/ratelimit that change
//! nothing here, and the names `replaces` and labels refer to.

use std::collections::{HashMap, HashSet};

use saphyr::{LoadableYamlNode, MarkedYaml, Marker, YamlData};

use super::reader::{Labelled, Reader, Replacing, Result, DESCRIPTOR_KEYS, MAX_DESCRIPTOR_ENTRIES};
use crate::config::rls::{RlsDescriptor, RlsDomain, RlsRule};
use crate::config::{ConfigError, ConfigWarning, Location};

impl Reader<'_> {
    /// The file's domain, as read (its names checked once the domain's files are all read).
    pub(super) fn domain(&mut self, text: &str) -> Result<DomainParts> {
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
        let mut parts = DomainParts {
            name,
            at: self.at(name_node.span.start),
            descriptors: Vec::new(),
            first_level_at: Vec::new(),
            rules: Vec::new(),
            replacing: Vec::new(),
            labels: Vec::new(),
        };
        if let Some(list) = fields.get("descriptors") {
            parts.descriptors = self.level(
                list,
                ("", ""),
                1,
                &mut parts.rules,
                &mut parts.replacing,
                &mut parts.labels,
            )?;
            parts.first_level_at = self.keys_at(list)?;
        }
        Ok(parts)
    }

    /// Where the `key` of each descriptor of a level (read without error) is written.
    fn keys_at(&mut self, list: &MarkedYaml<'_>) -> Result<Vec<Location>> {
        let YamlData::Sequence(items) = &list.data else {
            return Ok(Vec::new());
        };
        let mut at = Vec::with_capacity(items.len());
        for item in items {
            let fields = self.mapping(item, "a descriptor", DESCRIPTOR_KEYS)?;
            let span = fields.get("key").map_or(item.span.start, |k| k.span.start);
            at.push(self.at(span));
        }
        Ok(at)
    }

    /// One level of descriptors below `path` (the nodes' `key` or `key_value` joined by `.`,
    /// and their keys alone).
    fn level(
        &mut self,
        node: &MarkedYaml<'_>,
        (path, keys_path): (&str, &str),
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
            let keys_here = match keys_path {
                "" => key.clone(),
                _ => format!("{keys_path}.{key}"),
            };
            let shadow = self.flag(&fields, "shadow_mode")?;
            let quota = self.flag(&fields, "quota_mode")?;
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
                    let rule = self.rule(r, (&here, depth), (shadow, quota), replacing)?;
                    labels.push(Labelled {
                        label: rule.label.clone(),
                        keys: rule.name.is_none().then(|| keys_here.clone()),
                        rule: rules.len(),
                        at: self.at(r.span.start),
                    });
                    rules.push(rule);
                    Some(rules.len() - 1)
                }
                None => None,
            };
            let descriptors = match fields.get("descriptors") {
                Some(list) => self.level(
                    list,
                    (&here, &keys_here),
                    depth + 1,
                    rules,
                    replacing,
                    labels,
                )?,
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

    /// Settings of envoyproxy/ratelimit that change nothing here (warned about).
    fn without_effect(&mut self, fields: &HashMap<String, &MarkedYaml<'_>>) -> Result<()> {
        for name in ["detailed_metric", "value_to_metric"] {
            if self.flag(fields, name)? {
                self.warn(
                    fields[name].span.start,
                    format!("{name} has no effect: metric labels never carry request values (the rate limit's name, or its descriptor keys, is its `limit` label)"),
                );
            }
        }
        if let Some(m) = fields.get("metadata") {
            self.warn(
                m.span.start,
                "metadata is ignored: answers carry no dynamic metadata",
            );
        }
        Ok(())
    }
}

/// An unnamed rate limit shows under its descriptor keys joined by `.` (`path.user`) when no
/// other rate limit of the domain would show under the same; where two would (siblings that
/// differ only by their values), each keeps its path with the values (`path_/api/login.user`).
fn label_by_keys(rules: &mut [RlsRule], labels: &mut [Labelled]) {
    let mut uses: HashMap<&str, usize> = HashMap::new();
    for l in labels.iter() {
        *uses
            .entry(l.keys.as_deref().unwrap_or(&l.label))
            .or_default() += 1;
    }
    let unique: Vec<bool> = labels
        .iter()
        .map(|l| l.keys.as_deref().is_some_and(|k| uses[k] == 1))
        .collect();
    for (l, unique) in labels.iter_mut().zip(unique) {
        if let (Some(keys), true) = (l.keys.take(), unique) {
            rules[l.rule].label = keys.clone();
            l.label = keys;
        }
    }
}

/// A domain as read from its file(s), before its names are checked.
pub(super) struct DomainParts {
    pub name: String,
    /// Where its first file names it.
    pub at: Location,
    descriptors: Vec<RlsDescriptor>,
    /// Where each first-level descriptor's `key` is written, in `descriptors`' order.
    first_level_at: Vec<Location>,
    rules: Vec<RlsRule>,
    replacing: Vec<Replacing>,
    labels: Vec<Labelled>,
}

impl DomainParts {
    /// Adds another file's descriptors of the same domain beside this one's first level; the
    /// same key and value at the first level in both is an error, as within one file.
    pub fn merge(&mut self, other: DomainParts) -> Result<()> {
        for (d, at) in other.descriptors.iter().zip(&other.first_level_at) {
            let twin = (self.descriptors.iter())
                .position(|mine| mine.key == d.key && mine.value == d.value);
            if let Some(twin) = twin {
                let composite = match &d.value {
                    Some(v) => format!("{}_{v}", d.key),
                    None => d.key.clone(),
                };
                let first = self.first_level_at.get(twin).unwrap_or(&self.at);
                return Err(ConfigError::Invalid {
                    at: at.clone(),
                    message: format!(
                        "descriptor: duplicate `{composite}` in domain `{}` (also at {first}): merged files must not repeat a first-level key and value",
                        self.name
                    ),
                });
            }
        }
        let offset = self.rules.len();
        let mut descriptors = other.descriptors;
        for d in &mut descriptors {
            shift_rules(d, offset);
        }
        self.descriptors.extend(descriptors);
        self.first_level_at.extend(other.first_level_at);
        self.rules.extend(other.rules);
        self.replacing.extend(other.replacing);
        self.labels.extend(other.labels.into_iter().map(|mut l| {
            l.rule += offset;
            l
        }));
        Ok(())
    }

    /// The domain, with a warning for each `replaces` that names no rate limit of it (it
    /// replaces nothing) and for each rate limit that shows under another's label (both count
    /// under it in the metrics; `/admin/usage` picks a limit by it and finds the first):
    /// envoyproxy/ratelimit loads such files, so they load here too.
    pub fn finish(mut self, warnings: &mut Vec<ConfigWarning>) -> Result<RlsDomain> {
        label_by_keys(&mut self.rules, &mut self.labels);
        let names: HashSet<&str> = self
            .rules
            .iter()
            .filter_map(|r| r.name.as_deref())
            .collect();
        for r in &self.replacing {
            if !names.contains(r.name.as_str()) {
                warnings.push(ConfigWarning {
                    at: r.at.clone(),
                    message: format!(
                        "replaces: no rate_limit of this domain is named `{}`: it replaces nothing",
                        r.name
                    ),
                });
            }
        }
        let mut seen: HashSet<&str> = HashSet::new();
        for l in &self.labels {
            if !seen.insert(l.label.as_str()) {
                warnings.push(ConfigWarning {
                    at: l.at.clone(),
                    message: format!(
                        "rate_limit: another rate limit of this domain is called `{}` too: both count under that `limit` in the metrics, and /admin/usage's `limit=` finds the first; give each a `name` of its own",
                        l.label
                    ),
                });
            }
        }
        Ok(RlsDomain {
            name: self.name,
            descriptors: self.descriptors,
            rules: self.rules,
        })
    }
}

/// Moves a merged file's rule indexes past the rules already read.
fn shift_rules(d: &mut RlsDescriptor, offset: usize) {
    if let Some(r) = &mut d.rule {
        *r += offset;
    }
    for child in &mut d.descriptors {
        shift_rules(child, offset);
    }
}

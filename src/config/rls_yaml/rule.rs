//! One `rate_limit`: `unit` or slidegate's `window`, `requests_per_unit` within the algorithm's
//! bounds, slidegate's `algorithm`, `unlimited`, `name` and `replaces`.

use std::collections::HashMap;
use std::time::Duration;

use saphyr::{MarkedYaml, Scalar, YamlData};

use super::reader::{
    is_label, Reader, Replacing, Result, MAX_NAME_LEN, MAX_WINDOW, RATE_LIMIT_KEYS,
};
use crate::algorithm::AlgorithmId;
use crate::config::rls::{RlsRule, RlsUnit};

impl Reader<'_> {
    /// A `rate_limit` of the node at `path`.
    pub(super) fn rule(
        &mut self,
        node: &MarkedYaml<'_>,
        (path, entries): (&str, usize),
        (shadow, quota): (bool, bool),
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
                // Envoy shows the service no answer, so nothing would free a slot in flight
                let Some(id) = AlgorithmId::by_name(&text).filter(|a| a.get().has_window()) else {
                    let names: Vec<&str> = AlgorithmId::windowed().map(|a| a.name()).collect();
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
            quota,
            path: path.to_string(),
            entries,
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
                let window = match crate::config::parse_duration(&text) {
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
                at: self.at(n.span.start),
            });
            names.push(name);
        }
        Ok(names)
    }
}

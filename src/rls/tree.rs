//! A domain's descriptor tree, compiled for matching: each request descriptor walks it entry
//! by entry, as envoyproxy/ratelimit walks its own. At each level an entry takes the node with
//! its key and value, else the first node of its key whose wildcard value (`*` for any run of
//! characters) matches, else the node of its key with no value. The node reached with the last
//! entry gives the rate limit; a descriptor with more entries than the tree has levels, or one
//! an entry of which matches nothing, is not limited.
//!
//! Differences from envoyproxy/ratelimit: a wildcard is matched against the entry's value alone
//! (there, `key_value` is matched against `key_pattern`, so a key that itself holds `_` can
//! match another key's pattern).

use std::collections::HashMap;

use crate::config::RlsDescriptor;

/// One level of the tree: its nodes, by the entry key they take.
#[derive(Debug, Default)]
pub struct Level {
    by_key: HashMap<String, KeyNodes>,
}

/// The nodes of one level that take one entry key.
#[derive(Debug, Default)]
struct KeyNodes {
    exact: HashMap<String, Node>,
    wildcards: Vec<(Pattern, Node)>,
    any: Option<Node>,
}

/// A node: its rate limit (an index into the domain's rules), the pattern its value shares
/// (`share_threshold`), and the next level.
#[derive(Debug)]
struct Node {
    rule: Option<usize>,
    shared: Option<String>,
    next: Level,
}

/// A wildcard value, cut at its `*`s once at load.
#[derive(Debug)]
struct Pattern {
    parts: Vec<String>,
}

impl Pattern {
    fn new(value: &str) -> Pattern {
        Pattern {
            parts: value.split('*').map(str::to_string).collect(),
        }
    }

    /// Whether `value` is the literal parts in order with anything (or nothing) between.
    fn matches(&self, value: &str) -> bool {
        let (first, rest) = self.parts.split_first().expect("split yields a part");
        let Some(mut left) = value.strip_prefix(first.as_str()) else {
            return false;
        };
        let Some((last, middle)) = rest.split_last() else {
            return left.is_empty();
        };
        for part in middle {
            match left.find(part.as_str()) {
                Some(i) => left = &left[i + part.len()..],
                None => return false,
            }
        }
        left.len() >= last.len() && left.ends_with(last.as_str())
    }
}

/// What a descriptor matched: the rule, and per entry the value that counts in its key (the
/// node's wildcard pattern where the node shares its threshold, else the entry's own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matched {
    /// The rule's index in the domain.
    pub rule: usize,
    /// Per entry, the pattern that replaces its value in the counted key.
    pub shared: Vec<Option<String>>,
}

impl Level {
    /// Compiles a level of the domain's tree.
    pub fn compile(descriptors: &[RlsDescriptor]) -> Level {
        let mut level = Level::default();
        for d in descriptors {
            let node = Node {
                rule: d.rule,
                shared: d.share_threshold.then(|| d.value.clone()).flatten(),
                next: Level::compile(&d.descriptors),
            };
            let nodes = level.by_key.entry(d.key.clone()).or_default();
            match &d.value {
                None => nodes.any = Some(node),
                Some(v) if v.contains('*') => nodes.wildcards.push((Pattern::new(v), node)),
                Some(v) => {
                    nodes.exact.insert(v.clone(), node);
                }
            }
        }
        level
    }

    /// The rule a descriptor of `entries` (key, value) matches.
    pub fn find<'e>(
        &self,
        entries: impl ExactSizeIterator<Item = (&'e str, &'e str)>,
    ) -> Option<Matched> {
        let last = entries.len().checked_sub(1)?;
        let mut level = self;
        let mut shared = Vec::new();
        for (i, (key, value)) in entries.enumerate() {
            let node = level.by_key.get(key)?.take(value)?;
            shared.push(node.shared.clone());
            if i == last {
                return node.rule.map(|rule| Matched { rule, shared });
            }
            level = &node.next;
        }
        None
    }
}

impl KeyNodes {
    /// The node an entry with this value takes: the exact value, else the first wildcard
    /// that matches, else the key's node without a value.
    fn take(&self, value: &str) -> Option<&Node> {
        self.exact
            .get(value)
            .or_else(|| {
                self.wildcards
                    .iter()
                    .find(|(p, _)| p.matches(value))
                    .map(|(_, n)| n)
            })
            .or(self.any.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_their_literal_parts_in_order() {
        let cases = [
            ("value*", "value1", true),
            ("value*", "value", true),
            ("value*", "valu", false),
            ("/api/*/action", "/api/123/action", true),
            ("/api/*/action", "/api/123/other", false),
            ("/api/*/action", "/api/action", false),
            (
                "/api/*/resource/*/action",
                "/api/v1/resource/9/action",
                true,
            ),
            ("/api/*/resource/*/action", "/api/v1/resource/action", false),
            ("a*a", "a", false),
            ("a*a", "aa", true),
            ("*", "", true),
        ];
        for (pattern, value, expected) in cases {
            assert_eq!(
                Pattern::new(pattern).matches(value),
                expected,
                "{pattern} ~ {value}"
            );
        }
    }
}

//! Segments and plans: who gets which values of a limit. A segment is a set of numeric user ids
//! (u32) kept as a roaring bitmap, read from a file in the portable serialisation; a plan maps
//! string keys (API keys) to a plan name, read from a file of `"KEY" = "PLAN"` lines. Both are
//! loaded with the config and swapped with it on reload, so a reload that fails keeps them.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use roaring::RoaringBitmap;

/// Which values of a limit applied to a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TierName {
    /// A `[segments.NAME]` the key's user id is in.
    Segment(String),
    /// The `[plans]` plan of the key.
    Plan(String),
}

impl TierName {
    /// `"segment"` or `"plan"`: the member name in 429 bodies and admin answers.
    pub fn kind(&self) -> &'static str {
        match self {
            TierName::Segment(_) => "segment",
            TierName::Plan(_) => "plan",
        }
    }

    /// The segment's or plan's name.
    pub fn name(&self) -> &str {
        match self {
            TierName::Segment(n) | TierName::Plan(n) => n,
        }
    }
}

impl fmt::Display for TierName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind(), self.name())
    }
}

/// The segments (config order) and plans of one loaded config.
#[derive(Default)]
pub struct Membership {
    segments: Vec<(String, RoaringBitmap)>,
    plans: HashMap<String, String>,
}

impl fmt::Debug for Membership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Membership")
            .field(
                "segments",
                &self
                    .segments
                    .iter()
                    .map(|(n, b)| (n, b.len()))
                    .collect::<Vec<_>>(),
            )
            .field("plans", &self.plans.len())
            .finish()
    }
}

impl Membership {
    /// Segments in config order and the plans map.
    pub fn new(segments: Vec<(String, RoaringBitmap)>, plans: HashMap<String, String>) -> Self {
        Membership { segments, plans }
    }

    /// Segment names in config order.
    pub fn segment_names(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().map(|(n, _)| n.as_str())
    }

    /// The segment of `key` read as a u32 user id: the first (in config order) whose bitmap
    /// holds it. A user in several segments belongs to the first alone.
    pub fn segment_of(&self, key: &str) -> Option<&str> {
        let id: u32 = parse_user_id(key)?;
        self.segments
            .iter()
            .find(|(_, members)| members.contains(id))
            .map(|(name, _)| name.as_str())
    }

    /// The plan of `key`, when the plans file names it.
    pub fn plan_of(&self, key: &str) -> Option<&str> {
        self.plans.get(key).map(String::as_str)
    }

    /// The bitmaps, in config order (for `slidegate check`).
    pub fn segments(&self) -> &[(String, RoaringBitmap)] {
        &self.segments
    }

    /// Every key of the plans file with its plan.
    pub fn plans(&self) -> impl Iterator<Item = (&str, &str)> {
        self.plans.iter().map(|(k, p)| (k.as_str(), p.as_str()))
    }

    /// The plan names the plans file uses.
    pub fn plan_names(&self) -> std::collections::HashSet<String> {
        self.plans.values().cloned().collect()
    }

    /// How many keys the plans file maps.
    pub fn plan_count(&self) -> usize {
        self.plans.len()
    }

    /// Ids in more than one segment (each takes the first segment in config order).
    pub fn overlapping_ids(&self) -> u64 {
        let mut seen = RoaringBitmap::new();
        let mut overlap = RoaringBitmap::new();
        for (_, members) in &self.segments {
            overlap |= &seen & members;
            seen |= members;
        }
        overlap.len()
    }
}

/// A key read as a numeric user id: decimal digits only, fitting a u32.
pub fn parse_user_id(key: &str) -> Option<u32> {
    if key.is_empty() || key.len() > 10 || !key.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    key.parse().ok()
}

/// Reads user ids, one per line (blank lines skipped), from `reader` (named `name` in
/// errors): each a whole number from 0 to 4294967295, or an error naming the line.
pub fn parse_ids(reader: impl std::io::BufRead, name: &str) -> Result<Vec<u32>, String> {
    let mut ids = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| format!("{name}: {e}"))?;
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        match parse_user_id(text) {
            Some(id) => ids.push(id),
            None => {
                return Err(format!(
                    "{name}:{}: `{text}` is not a user id (a whole number from 0 to 4294967295)",
                    i + 1
                ))
            }
        }
    }
    Ok(ids)
}

/// Writes `ids` as a segment: a portable roaring bitmap at `out`; returns how many distinct
/// ids it holds.
pub fn write_segment(ids: impl IntoIterator<Item = u32>, out: &Path) -> Result<u64, String> {
    let bitmap: RoaringBitmap = ids.into_iter().collect();
    let mut bytes = Vec::with_capacity(bitmap.serialized_size());
    bitmap
        .serialize_into(&mut bytes)
        .map_err(|e| e.to_string())?;
    std::fs::write(out, bytes).map_err(|e| format!("cannot write `{}`: {e}", out.display()))?;
    Ok(bitmap.len())
}

/// Reads a portable roaring bitmap file.
pub fn read_segment(path: &Path) -> Result<RoaringBitmap, String> {
    let bytes =
        std::fs::read(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    RoaringBitmap::deserialize_from(&bytes[..]).map_err(|e| {
        format!(
            "`{}` is not a roaring bitmap in the portable format: {e}",
            path.display()
        )
    })
}

/// Why a plans file was refused: the message, and where in the file (its text and the byte
/// span of the offending line) when it was read.
#[derive(Debug)]
pub struct PlansFileError {
    /// What is wrong.
    pub message: String,
    /// The file's text and the span the message is about.
    pub at: Option<(String, std::ops::Range<usize>)>,
}

/// Reads a plans file: one `"KEY" = "PLAN"` per line (TOML), keys unique.
pub fn read_plans(path: &Path) -> Result<HashMap<String, String>, PlansFileError> {
    let text = std::fs::read_to_string(path).map_err(|e| PlansFileError {
        message: format!("cannot read `{}`: {e}", path.display()),
        at: None,
    })?;
    let table: std::collections::BTreeMap<String, toml::Spanned<toml::Value>> =
        match toml::from_str(&text) {
            Ok(table) => table,
            Err(e) => {
                return Err(PlansFileError {
                    message: format!(
                        "not a plans file (lines `\"KEY\" = \"PLAN\"`): {}",
                        e.message().trim()
                    ),
                    at: e.span().map(|span| (text.clone(), span)),
                })
            }
        };
    table
        .into_iter()
        .map(|(key, plan)| {
            let span = plan.span();
            match plan.into_inner() {
                toml::Value::String(plan) => Ok((key, plan)),
                other => Err(PlansFileError {
                    message: format!(
                        "the plan of `{key}` must be a string, got {}",
                        other.type_str()
                    ),
                    at: Some((text.clone(), span)),
                }),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_ids_are_plain_u32_decimals() {
        assert_eq!(parse_user_id("42"), Some(42));
        assert_eq!(parse_user_id("4294967295"), Some(u32::MAX));
        assert_eq!(parse_user_id("4294967296"), None);
        assert_eq!(parse_user_id("-1"), None);
        assert_eq!(parse_user_id("1e3"), None);
        assert_eq!(parse_user_id(""), None);
        assert_eq!(parse_user_id("12a"), None);
    }

    #[test]
    fn the_first_segment_in_config_order_wins() {
        let new: RoaringBitmap = [1, 2, 3].into_iter().collect();
        let active: RoaringBitmap = [3, 4].into_iter().collect();
        let m = Membership::new(
            vec![("new".into(), new), ("active".into(), active)],
            HashMap::new(),
        );
        assert_eq!(m.segment_of("3"), Some("new"));
        assert_eq!(m.segment_of("4"), Some("active"));
        assert_eq!(m.segment_of("9"), None);
        assert_eq!(m.segment_of("abc"), None);
        assert_eq!(m.overlapping_ids(), 1);
    }
}

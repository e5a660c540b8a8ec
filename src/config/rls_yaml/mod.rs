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
//! This file reads the files; `reader.rs` holds what every part of a file is read with,
//! `tree.rs` reads a domain and its levels of descriptors, `rule.rs` a `rate_limit`.

mod reader;
mod rule;
mod tree;

pub use reader::MAX_DESCRIPTOR_ENTRIES;
use reader::{Reader, Result};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::read_text;
use super::rls::RlsDomain;
use super::{ConfigError, ConfigWarning};

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
        let text = read_text(&file)?;
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
        loaded
            .domains
            .push(Arc::new(parts.finish(&mut loaded.warnings)?));
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

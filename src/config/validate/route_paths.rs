//! `routes[].path`: a pattern (exact, or a prefix with a trailing `/*`) in the normal form
//! requests are matched in, since a path no normalised request can have would never match.

use std::borrow::Cow;

use toml::Spanned;

use super::{Result, Validator};
use crate::config::PathPattern;

impl Validator<'_> {
    /// A route's `path`: exact, or a prefix when it ends in `/*` (the only `*` allowed).
    pub(super) fn path(&self, v: &Spanned<String>, key: &str) -> Result<PathPattern> {
        let p = v.get_ref();
        if !p.starts_with('/') || p.contains('?') || p.contains('#') {
            return self.error(
                v.span(),
                format!("{key}: `{p}` must start with `/` and have no query"),
            );
        }
        if let Some(base) = p.strip_suffix("/*") {
            if base.contains('*') {
                return self.error(
                    v.span(),
                    format!("{key}: `{p}`: `*` is only allowed as a trailing `/*`"),
                );
            }
            let base = if base.is_empty() { "/" } else { base };
            self.normal_path(v, key, base, "/*")?;
            return Ok(PathPattern {
                path: base.to_string(),
                prefix: true,
            });
        }
        if p.contains('*') {
            return self.error(
                v.span(),
                format!("{key}: `{p}`: `*` is only allowed as a trailing `/*`"),
            );
        }
        self.normal_path(v, key, p, "")?;
        Ok(PathPattern {
            path: p.clone(),
            prefix: false,
        })
    }

    /// A route's path (before its `suffix`, `/*` or none) must be in the form requests are
    /// matched in (README, "The traffic path"): normalised and without `;` parameters, since
    /// `/a/../b`, `/a//b` or `/a;v=1` would never match anything.
    fn normal_path(&self, v: &Spanned<String>, key: &str, path: &str, suffix: &str) -> Result<()> {
        let written = v.get_ref();
        let never = |why: &str, wanted: &str| {
            let wanted = if suffix.is_empty() {
                wanted
            } else {
                wanted.trim_end_matches('/')
            };
            self.error(
                v.span(),
                format!("{key}: `{written}` would never match: {why}, so write `{wanted}{suffix}`"),
            )
        };
        match crate::path::normalize(path) {
            Ok(Cow::Borrowed(_)) => {}
            Ok(Cow::Owned(normal)) => {
                return never("requests are matched by their normalised path", &normal)
            }
            Err(e) => {
                return self.error(
                    v.span(),
                    format!("{key}: `{written}` would never match: {e}"),
                )
            }
        }
        match crate::path::without_parameters(path) {
            Ok(Cow::Borrowed(_)) => Ok(()),
            Ok(Cow::Owned(routed)) => never(
                "routes match a request's path without its `;` parameters",
                &routed,
            ),
            Err(e) => self.error(
                v.span(),
                format!("{key}: `{written}` would never match: {e}"),
            ),
        }
    }
}

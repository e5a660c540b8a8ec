//! `routes[].path`: a pattern (exact, or a prefix with a trailing `/*`) in the routing form
//! requests are matched in, since a path no normalised request can have would never match.

use toml::Spanned;

use super::{Result, Validator};
use crate::config::PathPattern;
use crate::path::{normalize, routing_form, PathError};

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
            return Ok(PathPattern {
                path: self.normal_path(v, key, base, "/*")?,
                prefix: true,
            });
        }
        if p.contains('*') {
            return self.error(
                v.span(),
                format!("{key}: `{p}`: `*` is only allowed as a trailing `/*`"),
            );
        }
        Ok(PathPattern {
            path: self.normal_path(v, key, p, "")?,
            prefix: false,
        })
    }

    /// A route's path (before its `suffix`, `/*` or none) in the form requests are routed in
    /// (README, "The traffic path"): a path whose normal form differs other than in how its
    /// escapes are spelled (`/a/../b`, `/a//b`), or that has `;` parameters, would never match
    /// anything and is refused; a spelling of an escape (`%3A`, `%c3%a9`, `é`) is taken as its
    /// routing form, as requests are.
    fn normal_path(
        &self,
        v: &Spanned<String>,
        key: &str,
        path: &str,
        suffix: &str,
    ) -> Result<String> {
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
        let unmatchable = |e: PathError| {
            self.error(
                v.span(),
                format!("{key}: `{written}` would never match: {e}"),
            )
        };
        let normal = normalize(path).or_else(&unmatchable)?;
        let routed = routing_form(&normal).or_else(&unmatchable)?;
        if path.contains(';') {
            return never(
                "routes match a request's path without its `;` parameters",
                &routed,
            );
        }
        if routing_form(path).or_else(&unmatchable)? != routed {
            return never("requests are matched by their normalised path", &normal);
        }
        Ok(routed.into_owned())
    }
}

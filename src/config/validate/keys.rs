//! `key = [...]` of a route or a limit: each part, as a string or an inline table with its
//! options, checked against what it needs (`[jwt]` for `jwt:`, the `[keys]` secret for
//! `hash = true`, `normalize = "phone"` for `region`).

use std::str::FromStr;

use toml::Spanned;

use super::routes::RouteContext;
use super::{Result, Validator};
use crate::config::raw::{RawKeyPart, RawKeyPartTable};
use crate::config::{KeyPart, KeyPartSpec, KeySpec, Normalize};

impl Validator<'_> {
    pub(super) fn key_spec(
        &self,
        raw: &Spanned<Vec<Spanned<RawKeyPart>>>,
        key: &str,
        context: &RouteContext<'_>,
    ) -> Result<KeySpec> {
        if raw.get_ref().is_empty() {
            return self.error(
                raw.span(),
                format!("{key}: needs at least one part (for one shared limit, use [\"route\"])"),
            );
        }
        let mut parts = Vec::with_capacity(raw.get_ref().len());
        for (i, p) in raw.get_ref().iter().enumerate() {
            let at = format!("{key}[{i}]");
            let spec = match p.get_ref() {
                RawKeyPart::Text(text) => KeyPartSpec::plain(self.part(text, p.span(), key)?),
                RawKeyPart::Table(table) => self.part_table(table, &at, context)?,
            };
            if matches!(spec.part, KeyPart::Jwt(_)) && !context.has_jwt {
                return self.error(
                    p.span(),
                    format!(
                        "{key}: `{}` needs a [jwt] section to verify tokens",
                        spec.part
                    ),
                );
            }
            parts.push(spec);
        }
        Ok(KeySpec { parts })
    }

    fn part(&self, text: &str, span: std::ops::Range<usize>, key: &str) -> Result<KeyPart> {
        KeyPart::parse(text).or_else(|why| self.error(span, format!("{key}: {why}")))
    }

    fn part_table(
        &self,
        t: &RawKeyPartTable,
        at: &str,
        context: &RouteContext<'_>,
    ) -> Result<KeyPartSpec> {
        let part = self.part(t.part.get_ref(), t.part.span(), &format!("{at}.part"))?;
        let normalize = match &t.normalize {
            Some(n) => Some(self.choice(
                Some(n),
                &format!("{at}.normalize"),
                "normalization",
                Normalize::NAMES,
                Normalize::Lower,
            )?),
            None => None,
        };
        let region = match &t.region {
            Some(r) if normalize != Some(Normalize::Phone) => {
                return self.error(
                    r.span(),
                    format!("{at}.region: only means something with normalize = \"phone\""),
                )
            }
            Some(r) => match phonenumber::country::Id::from_str(r.get_ref()) {
                Ok(id) => Some(id),
                Err(_) => {
                    return self.error(
                        r.span(),
                        format!(
                            "{at}.region: `{}` is not a region code (ISO 3166 alpha-2, like \"ID\" or \"DE\")",
                            r.get_ref()
                        ),
                    )
                }
            },
            None => None,
        };
        let prefix = match &t.prefix {
            Some(p) if *p.get_ref() < 1 || *p.get_ref() > 1024 => {
                return self.error(
                    p.span(),
                    format!(
                        "{at}.prefix: must be between 1 and 1024 characters, got {}",
                        p.get_ref()
                    ),
                )
            }
            Some(p) => Some(*p.get_ref() as usize),
            None => None,
        };
        let hash = t.hash.as_ref().is_some_and(|h| *h.get_ref());
        if hash && context.keys.hash_secret.is_none() {
            let why = match &context.keys.hash_secret_env {
                Some(env) => {
                    format!(
                        "the environment variable `{}` ([keys] hash_secret_env) is not set",
                        crate::config::redact_url(env)
                    )
                }
                None => {
                    "set [keys] hash_secret_env to the environment variable holding the HMAC secret"
                        .to_string()
                }
            };
            let span = t.hash.as_ref().map_or(t.part.span(), |h| h.span());
            return self.error(
                span,
                format!("{at}.hash: `hash = true` needs a secret: {why}"),
            );
        }
        Ok(KeyPartSpec {
            part,
            normalize,
            region,
            prefix,
            hash,
        })
    }
}

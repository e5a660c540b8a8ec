//! `RawConfig` -> `Config`: parse every value, check every reference, and point each error at
//! the value's `FILE:LINE:COLUMN` with the key path in the message. One module per part of the
//! file: `sections.rs` (server, admin, store, upstreams, segments and plans), `secrets.rs`
//! (jwt, keys), `routes.rs` (with `route_paths.rs`), `limits.rs` (with `answers.rs`: leases,
//! `cost_from`, `cost`), `keys.rs` (key parts and their options), `deciders.rs` (`[rls]` with
//! its YAML files, `[ext_authz]`, `[forward_auth]`), `warnings.rs`
//! (legal but almost always a mistake). This file has the parse and the helpers they share.

mod answers;
mod deciders;
mod keys;
mod limits;
mod redis_url;
mod route_paths;
mod routes;
mod secrets;
mod sections;
mod tiers;
mod warnings;

use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use toml::Spanned;

use super::raw::RawConfig;
use super::{Config, ConfigError, ConfigWarning, Environment, Location, Purpose};

/// Parses and validates the text of a config file.
pub(super) fn parse(
    path: &Path,
    text: &str,
    env: &Environment,
    purpose: Purpose,
) -> std::result::Result<Config, ConfigError> {
    let v = Validator {
        file: path.display().to_string(),
        dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
        text,
        env,
        purpose,
        asked_by_proxy: false,
        warnings: Vec::new(),
    };
    let raw: RawConfig = toml::from_str(text).map_err(|e| v.toml_error(&e))?;
    v.config(path, raw)
}

/// The state of one validation: where the text came from, and the warnings so far.
struct Validator<'a> {
    file: String,
    dir: PathBuf,
    text: &'a str,
    env: &'a Environment,
    purpose: Purpose,
    /// Whether `[forward_auth]` or `[ext_authz]` is set: a proxy in front asks about the
    /// routes, which may then do without `upstream`.
    asked_by_proxy: bool,
    warnings: Vec<ConfigWarning>,
}

type Result<T> = std::result::Result<T, ConfigError>;

/// The longest window or block: 366 days.
const MAX_WINDOW: Duration = Duration::from_secs(366 * 24 * 3600);

impl Validator<'_> {
    fn config(mut self, path: &Path, raw: RawConfig) -> Result<Config> {
        let server = self.server(&raw)?;
        let admin = self.admin(&raw, server.listen)?;
        let store = self.store(&raw)?;
        self.store_warnings(&raw, &store);
        let mut listeners = vec![
            ("server.listen", server.listen),
            ("admin.listen", admin.listen),
        ];
        let rls = self.rls_section(&raw, &listeners, store.on_error)?;
        let ext_authz = self.ext_authz_section(&raw, &listeners)?;
        listeners.extend(rls.as_ref().map(|r| ("rls.listen", r.listen)));
        listeners.extend(ext_authz.as_ref().map(|e| ("ext_authz.listen", e.listen)));
        let forward_auth = self.forward_auth_section(&raw, &listeners)?;
        self.asked_by_proxy = forward_auth.is_some() || ext_authz.is_some();
        let upstreams = self.upstreams(&raw.upstreams)?;
        let jwt = self.jwt_section(&raw)?;
        let keys = self.keys_section(&raw)?;
        let (tier_files, membership, unknown_plan) = self.tiers(&raw)?;
        let routes = self.routes(&raw, &upstreams, jwt.is_some(), &keys, &membership)?;
        self.config_warnings(&raw, &server, &admin, &routes);
        self.domains_apart(&raw, rls.as_ref(), &routes)?;
        self.asked_routes_warnings(&raw, &routes);
        Ok(Config {
            source: path.to_path_buf(),
            purpose: self.purpose,
            env: self.env.clone(),
            server,
            admin,
            store,
            upstreams,
            routes,
            jwt,
            keys,
            tier_files,
            membership: Arc::new(membership),
            unknown_plan,
            rls,
            forward_auth,
            ext_authz,
            warnings: self.warnings,
        })
    }

    fn at(&self, span: Range<usize>) -> Location {
        Location::from_span(&self.file, self.text, span)
    }

    /// An error at `span`; a URL the message shows (a value given where another kind was
    /// expected) is shown without its password.
    fn error<T>(&self, span: Range<usize>, message: impl Into<String>) -> Result<T> {
        Err(ConfigError::Invalid {
            at: self.at(span),
            message: super::redact_secrets(&message.into()),
        })
    }

    fn warn(&mut self, span: Range<usize>, message: impl Into<String>) {
        let at = self.at(span);
        self.warnings.push(ConfigWarning {
            at,
            message: super::redact_secrets(&message.into()),
        });
    }

    /// A setting that names one of a fixed list of `choices`: its value, `default` when the
    /// setting is absent, or an error naming what is allowed ("unknown WHAT `x`, expected ...").
    fn choice<T: Copy>(
        &self,
        v: Option<&Spanned<String>>,
        key: &str,
        what: &str,
        choices: &[(&str, T)],
        default: T,
    ) -> Result<T> {
        let Some(v) = v else { return Ok(default) };
        let name = v.get_ref().as_str();
        if let Some(&(_, value)) = choices.iter().find(|(n, _)| *n == name) {
            return Ok(value);
        }
        let quoted: Vec<String> = choices.iter().map(|(n, _)| format!("\"{n}\"")).collect();
        self.error(
            v.span(),
            format!(
                "{key}: unknown {what} `{name}`, expected {}",
                one_of(&quoted)
            ),
        )
    }

    /// An integer setting within `min..=max`, or `default` when absent.
    fn integer_in(
        &self,
        v: Option<&Spanned<i64>>,
        key: &str,
        min: i64,
        max: i64,
        default: i64,
    ) -> Result<i64> {
        let Some(v) = v else { return Ok(default) };
        let n = *v.get_ref();
        if n < min || n > max {
            return self.error(
                v.span(),
                format!("{key}: must be between {min} and {max}, got {n}"),
            );
        }
        Ok(n)
    }

    fn duration(&self, v: &Spanned<String>, key: &str) -> Result<Duration> {
        match super::duration::parse(v.get_ref()) {
            Ok(d) => Ok(d),
            Err(e) => self.error(
                v.span(),
                format!(
                    "{key}: `{}` is not a duration: {e}; write it like \"250ms\", \"1s\", \"5m\", \"1h\", \"7d\"",
                    v.get_ref()
                ),
            ),
        }
    }

    fn duration_or(
        &self,
        v: Option<&Spanned<String>>,
        key: &str,
        default: Duration,
    ) -> Result<Duration> {
        v.map_or(Ok(default), |v| self.duration(v, key))
    }

    /// A duration within `min..=max` (inclusive), or `default` when absent.
    fn duration_in(
        &self,
        v: Option<&Spanned<String>>,
        key: &str,
        min: Duration,
        max: Duration,
        default: Duration,
    ) -> Result<Duration> {
        let Some(v) = v else { return Ok(default) };
        let d = self.duration(v, key)?;
        if d < min || d > max {
            return self.error(
                v.span(),
                format!(
                    "{key}: must be between {} and {}, got {}",
                    show(min),
                    show(max),
                    show(d)
                ),
            );
        }
        Ok(d)
    }

    fn positive_duration(&self, v: &Spanned<String>, key: &str) -> Result<Duration> {
        let d = self.duration(v, key)?;
        if d.is_zero() {
            return self.error(v.span(), format!("{key}: must be longer than zero"));
        }
        Ok(d)
    }

    fn socket_addr(
        &self,
        v: Option<&Spanned<String>>,
        key: &str,
        default: &str,
    ) -> Result<SocketAddr> {
        let Some(v) = v else {
            return Ok(default.parse().expect("default address parses"));
        };
        v.get_ref().parse().or_else(|_| {
            self.error(
                v.span(),
                format!("{key}: `{}` is not an IP:PORT address", v.get_ref()),
            )
        })
    }

    /// A list of CIDRs (or single addresses).
    fn networks(&self, list: Option<&[Spanned<String>]>, key: &str) -> Result<Vec<IpNet>> {
        let mut nets = Vec::new();
        for item in list.unwrap_or_default() {
            let text = item.get_ref().trim();
            let net = text
                .parse::<IpNet>()
                .ok()
                .or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from));
            match net {
                Some(n) => nets.push(n),
                None => {
                    return self.error(
                        item.span(),
                        format!("{key}: `{text}` is not a CIDR (like 10.0.0.0/8) or an IP address"),
                    )
                }
            }
        }
        Ok(nets)
    }

    fn name(&self, v: &Spanned<String>, key: &str) -> Result<String> {
        self.check_name(v.get_ref(), v.span(), key)?;
        Ok(v.get_ref().clone())
    }

    /// Names of routes, limits and segments: they become metric labels and key segments.
    fn check_name(&self, n: &str, span: Range<usize>, key: &str) -> Result<()> {
        let valid = !n.is_empty()
            && n.len() <= 64
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !valid {
            return self.error(
                span,
                format!("{key}: `{n}` must be 1-64 characters of letters, digits, `-`, `_` or `.`"),
            );
        }
        Ok(())
    }

    /// A TOML or type error, at its place, naming the key it is about.
    fn toml_error(&self, e: &toml::de::Error) -> ConfigError {
        let span = e.span().unwrap_or(0..0);
        let message = plain_toml_message(e.message(), self.text.get(span.clone()));
        let message = match key_path(self.text, span.start) {
            Some(path) if !message.starts_with("unknown field") => format!("{path}: {message}"),
            Some(path) => match path.rsplit_once('.') {
                Some((table, _)) => format!("{table}: {message}"),
                None => message,
            },
            None => message,
        };
        ConfigError::Invalid {
            at: self.at(span),
            message: super::redact_secrets(&message),
        }
    }
}

/// The TOML parser's message in the operator's terms: no Rust type names, the key a duplicate
/// is named (`written`: the text the error points at).
fn plain_toml_message(message: &str, written: Option<&str>) -> String {
    let message = message
        .trim()
        .replace('\n', " ")
        .replace("expected i64", "expected an integer")
        .replace("expected f64", "expected a number")
        .replace("expected a map", "expected a table");
    if message == "duplicate key" {
        if let Some(key) = written
            .map(str::trim)
            .filter(|k| !k.is_empty() && !k.contains('\n'))
        {
            return format!("duplicate key `{key}`: a setting appears once in its table");
        }
    }
    if let Some((before, _)) = message.split_once(" as i128") {
        let literal = before.trim_start_matches("invalid type: ");
        return format!("{literal} is too large (the largest is {})", i64::MAX);
    }
    match message.split_once("expected struct Raw") {
        Some((before, _)) => format!("{before}expected a table"),
        None => message,
    }
}

/// `"a", "b" or "c"`.
fn one_of(quoted: &[String]) -> String {
    match quoted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// A duration as the config writes it.
fn show(d: Duration) -> String {
    super::duration::format(d)
}

/// The key path (`routes[0].limits[1].limit`) of the value or key at byte `at` of `text`.
fn key_path(text: &str, at: usize) -> Option<String> {
    let table = toml::de::DeTable::parse(text).ok()?;
    let mut path = String::new();
    walk_table(table.get_ref(), at, &mut path).then_some(path)
}

fn walk_table(table: &toml::de::DeTable<'_>, at: usize, path: &mut String) -> bool {
    for (key, value) in table.iter() {
        let inside = key.span().contains(&at) || value.span().contains(&at);
        let len = path.len();
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(key.get_ref());
        if walk_value(value.get_ref(), at, path) || inside {
            return true;
        }
        path.truncate(len);
    }
    false
}

fn walk_value(value: &toml::de::DeValue<'_>, at: usize, path: &mut String) -> bool {
    if let Some(table) = value.as_table() {
        return walk_table(table, at, path);
    }
    if let Some(array) = value.as_array() {
        for (i, item) in array.iter().enumerate() {
            let len = path.len();
            path.push_str(&format!("[{i}]"));
            if walk_value(item.get_ref(), at, path) || item.span().contains(&at) {
                return true;
            }
            path.truncate(len);
        }
    }
    false
}

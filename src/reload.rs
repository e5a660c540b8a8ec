//! What a reload may not do ([`ReloadError`]): besides a file that fails validation, three
//! edits that validate but would take the running gateway somewhere an operator never meant
//! to go. An empty config file (a write still under way: truncated, not yet rewritten; or
//! nothing but comments) would drop every route, turning every limit off; a plans file
//! emptied the same way would take every key off its plan; and an `admin.token_env` naming a
//! variable the gateway's environment does not hold (the environment is the one it started
//! with) would leave the admin API with no token, refusing every call, the next reload
//! included. All three are refused, and the running config stays.
//!
//! What a reload cannot change: the settings read only at start ([`RESTART_ONLY`], `store.url`,
//! the deciders' listeners) keep their running values, and each one the file changed is named
//! ([`PendingSetting`], [`keep_restart_only`]).

use std::path::{Path, PathBuf};

use crate::config::{redact_url, Config, ConfigError, Location};
use crate::route::CompileError;

/// Why a reload was refused.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The new file does not validate.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The new file validates but cannot be compiled.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// The file holds no setting.
    #[error("{}: the file is empty, no setting in it (a write still under way?): a reload would drop every route", .0.display())]
    EmptyFile(PathBuf),
    /// The plans file, which held keys, holds none.
    #[error("{}: the plans file is empty, no key in it (a write still under way?): every key would lose its plan", .0.display())]
    EmptiedPlans(PathBuf),
    /// The admin API would lose its token.
    #[error("{0}: admin.token_env: `{1}` is not set in the gateway's environment: the admin API would refuse every call, this reload's next included (a new variable needs a restart)")]
    AdminLockedOut(Location, String),
}

/// A restart-only setting that a reload changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingSetting {
    /// The key, as the file spells it.
    pub setting: String,
    /// The value in force.
    pub running: String,
    /// The value the file now has.
    pub configured: String,
}

impl PendingSetting {
    pub(crate) fn new(setting: &str, running: String, configured: String) -> Self {
        PendingSetting {
            setting: setting.to_string(),
            running,
            configured,
        }
    }
}

/// Refuses an empty config file at `path` (nothing but whitespace and comments: no setting at
/// all), before it is read as a config.
pub fn refuse_empty(path: &Path) -> Result<(), ReloadError> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(());
    };
    match toml::from_str::<toml::Table>(&text) {
        Ok(table) if table.is_empty() => Err(ReloadError::EmptyFile(path.to_path_buf())),
        _ => Ok(()),
    }
}

/// Refuses `new` when its plans file holds no key where `current`'s held some: a file being
/// rewritten in place (truncated, not yet written) would take every key off its plan. A
/// plans file that starts empty is no error.
pub fn refuse_emptied_plans(current: &Config, new: &Config) -> Result<(), ReloadError> {
    let emptied = current.membership.plan_count() > 0 && new.membership.plan_count() == 0;
    match (&new.tier_files.plans, emptied) {
        (Some(path), true) => Err(ReloadError::EmptiedPlans(path.clone())),
        _ => Ok(()),
    }
}

/// Refuses `new` when it takes the admin API's token away from `running`.
pub fn refuse_lockout(running: &Config, new: &Config) -> Result<(), ReloadError> {
    match (&running.admin.token, &new.admin.token) {
        (Some(_), None) => Err(ReloadError::AdminLockedOut(
            new.admin.token_env_at.clone(),
            new.admin.token_env.clone(),
        )),
        _ => Ok(()),
    }
}

/// A setting read only at start: its key as the file spells it, how its value shows, and how a
/// reloaded config keeps the running value.
pub struct RestartOnly {
    /// The key, as the file spells it.
    pub setting: &'static str,
    show: fn(&Config) -> String,
    keep: fn(&mut Config, &Config),
}

/// A setting's value as the config file writes it (`1m`, `allow`, `127.0.0.1:8080`).
trait AsWritten {
    fn as_written(&self) -> String;
}

impl AsWritten for std::time::Duration {
    fn as_written(&self) -> String {
        crate::config::format_duration(*self)
    }
}

macro_rules! as_written_by_display {
    ($($t:ty),+) => {
        $(impl AsWritten for $t {
            fn as_written(&self) -> String {
                self.to_string()
            }
        })+
    };
}

as_written_by_display!(
    bool,
    std::net::SocketAddr,
    usize,
    u32,
    String,
    crate::config::Backend,
    crate::config::OnError,
    crate::config::ClockSource,
    crate::config::ScriptsMode
);

macro_rules! restart_only {
    ($setting:literal, |$c:ident| $field:expr) => {
        RestartOnly {
            setting: $setting,
            show: |$c: &Config| $field.as_written(),
            keep: |to: &mut Config, from: &Config| {
                let $c = from;
                let value = $field.clone();
                let $c = to;
                $field = value;
            },
        }
    };
}

/// Every setting read only at start, once.
pub static RESTART_ONLY: [RestartOnly; 16] = [
    restart_only!("server.listen", |c| c.server.listen),
    restart_only!("admin.listen", |c| c.admin.listen),
    restart_only!("server.max_connections", |c| c.server.max_connections),
    restart_only!("server.header_read_timeout", |c| c
        .server
        .header_read_timeout),
    restart_only!("server.idle_timeout", |c| c.server.idle_timeout),
    restart_only!("server.shutdown_grace", |c| c.server.shutdown_grace),
    restart_only!("server.max_header_bytes", |c| c.server.max_header_bytes),
    restart_only!("server.max_headers", |c| c.server.max_headers),
    restart_only!("server.watch_files", |c| c.server.watch_files),
    restart_only!("store.backend", |c| c.store.backend),
    restart_only!("store.timeout", |c| c.store.timeout),
    restart_only!("store.on_error", |c| c.store.on_error),
    restart_only!("store.key_prefix", |c| c.store.key_prefix),
    restart_only!("store.clock", |c| c.store.clock),
    restart_only!("store.replica_acks", |c| c.store.replica_acks),
    restart_only!("store.scripts", |c| c.store.scripts),
];

/// `store.url` and `store.max_keys` are read only at start too; the URL shows redacted.
fn store_url_and_bound(running: &Config, configured: &Config) -> Vec<PendingSetting> {
    let mut out = Vec::new();
    let (r, c) = (
        redact_url(&running.store.url),
        redact_url(&configured.store.url),
    );
    if r != c {
        out.push(PendingSetting::new("store.url", r, c));
    }
    let (r, c) = (running.store.max_keys, configured.store.max_keys);
    if r != c {
        out.push(PendingSetting::new(
            "store.max_keys",
            r.to_string(),
            c.to_string(),
        ));
    }
    out
}

/// `rls.listen`, `forward_auth.listen` and `ext_authz.listen` are read only at start (with
/// whether the section is there at all: a listener is started or not): the running ones are
/// kept.
fn decider_listeners(running: &Config, configured: &mut Config) -> Vec<PendingSetting> {
    let shown = |a: Option<std::net::SocketAddr>| a.map_or("none".to_string(), |a| a.to_string());
    let pairs = [
        (
            "rls.listen",
            running.rls.as_ref().map(|r| r.listen),
            configured.rls.as_mut().map(|r| &mut r.listen),
        ),
        (
            "forward_auth.listen",
            running.forward_auth.as_ref().map(|f| f.listen),
            configured.forward_auth.as_mut().map(|f| &mut f.listen),
        ),
        (
            "ext_authz.listen",
            running.ext_authz.as_ref().map(|e| e.listen),
            configured.ext_authz.as_mut().map(|e| &mut e.listen),
        ),
    ];
    let mut out = Vec::new();
    for (setting, running, configured) in pairs {
        let written = configured.as_deref().copied();
        if running != written {
            out.push(PendingSetting::new(setting, shown(running), shown(written)));
        }
        if let (Some(r), Some(c)) = (running, configured) {
            *c = r;
        }
    }
    out
}

/// Keeps in `config` the running value of every setting read only at start, and names each one
/// the file changed: a reload applies the rest.
pub fn keep_restart_only(running: &Config, config: &mut Config) -> Vec<PendingSetting> {
    let mut pending: Vec<PendingSetting> = RESTART_ONLY
        .iter()
        .filter_map(|s| {
            let (r, c) = ((s.show)(running), (s.show)(config));
            (r != c).then(|| PendingSetting::new(s.setting, r, c))
        })
        .collect();
    pending.extend(store_url_and_bound(running, config));
    pending.extend(decider_listeners(running, config));
    for s in &RESTART_ONLY {
        (s.keep)(config, running);
    }
    config.store = running.store.clone();
    pending
}

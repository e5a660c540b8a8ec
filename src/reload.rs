//! What a reload may not do ([`ReloadError`]): besides a file that fails validation, two edits
//! that validate but would take the running gateway somewhere an operator never meant to go.
//! An empty config file (a write still under way: truncated, not yet rewritten; or nothing but
//! comments) would drop
//! every route, turning every limit off; and an `admin.token_env` naming a variable the
//! gateway's environment does not hold (the environment is the one it started with) would
//! leave the admin API with no token, refusing every call, the next reload included. Both are
//! refused, and the running config stays.

use std::path::{Path, PathBuf};

use crate::config::{Config, ConfigError, Location};
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
    /// The admin API would lose its token.
    #[error("{0}: admin.token_env: `{1}` is not set in the gateway's environment: the admin API would refuse every call, this reload's next included (a new variable needs a restart)")]
    AdminLockedOut(Location, String),
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

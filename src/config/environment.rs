//! Where a config looks environment variables up (secrets, the Redis URL): the process's own
//! environment, or a lookup given by the caller (tests, an application embedding the layer). A
//! config keeps the one it was read with, and a reload reads the file again with it.

use std::fmt;
use std::sync::Arc;

/// Environment variable that overrides `store.url`.
pub const REDIS_URL_ENV: &str = "SLIDEGATE_REDIS_URL";
/// Environment variable naming the config file when `--config` is not given.
pub const CONFIG_ENV: &str = "SLIDEGATE_CONFIG";
/// Config file used when neither `--config` nor `SLIDEGATE_CONFIG` is given.
pub const DEFAULT_CONFIG_FILE: &str = "config.toml";

/// Looks one variable up.
type Lookup = dyn Fn(&str) -> Option<String> + Send + Sync;

/// A source of environment variables.
#[derive(Clone)]
pub struct Environment(Arc<Lookup>);

impl Environment {
    /// The process's own environment.
    pub fn process() -> Environment {
        Environment::from_fn(|name| std::env::var(name).ok())
    }

    /// Variables looked up with `lookup`.
    pub fn from_fn(lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Environment {
        Environment(Arc::new(lookup))
    }

    /// An environment in which no variable is set.
    pub fn empty() -> Environment {
        Environment::from_fn(|_| None)
    }

    /// The value of `name`, when set.
    pub fn get(&self, name: &str) -> Option<String> {
        (self.0)(name)
    }
}

impl fmt::Debug for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Environment")
    }
}

impl<F> From<F> for Environment
where
    F: Fn(&str) -> Option<String> + Send + Sync + 'static,
{
    fn from(lookup: F) -> Environment {
        Environment::from_fn(lookup)
    }
}

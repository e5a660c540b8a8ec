//! The config fixtures under `tests/fixtures/config/`, loaded as the gateway loads a file, and a
//! refusal read as the operator reads it: `FILE:LINE:COLUMN: message`.

use std::path::{Path, PathBuf};

use slidegate::config::{Config, Purpose};

/// Where the fixtures live, relative to the crate root.
pub const FIXTURES: &str = "tests/fixtures/config";

pub fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixture(name: &str) -> PathBuf {
    manifest_dir().join(FIXTURES).join(name)
}

/// An empty environment: no secrets, no `SLIDEGATE_REDIS_URL`.
pub fn no_env(_: &str) -> Option<String> {
    None
}

/// Loads a fixture that must be refused and returns the error as the operator reads it, with
/// the fixture directory cut off the front: `NAME:LINE:COLUMN: message`.
pub fn load_err(name: &str) -> String {
    let path = fixture(name);
    let err = match Config::load_with_env(&path, no_env) {
        Ok(_) => panic!("{name} should be refused but loaded"),
        Err(e) => e,
    };
    let file = path.display().to_string();
    assert_eq!(
        err.location().map(|l| l.file.as_str()),
        Some(file.as_str()),
        "{name}: the error should point into the file"
    );
    let text = err.to_string();
    let rest = text
        .strip_prefix(&file)
        .unwrap_or_else(|| panic!("{name}: error does not start with the file name: {text}"));
    format!("{name}{rest}")
}

pub fn load_ok(path: &Path, env: impl Into<slidegate::config::Environment>) -> Config {
    Config::load_with_env(path, env)
        .unwrap_or_else(|e| panic!("{} should load: {e}", path.display()))
}

/// `text` (a fixture's, edited) loaded as if it were the fixture `name`.
pub fn load_text(name: &str, text: &str) -> Result<Config, slidegate::config::ConfigError> {
    Config::from_toml(&fixture(name), text, no_env, Purpose::Gateway)
}

/// Line and column (1-based) of the first `url = "` value after `[store]` in `text`.
pub fn store_url_position(text: &str) -> (usize, usize) {
    let store = text.find("[store]").expect("a [store] section");
    let url = store + text[store..].find("url = \"").expect("a store url") + "url = ".len();
    let line = text[..url].matches('\n').count() + 1;
    let column = url - text[..url].rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, column)
}

pub const NOT_REDIS: &str = "http://127.0.0.1:6379";

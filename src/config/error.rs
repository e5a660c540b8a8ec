//! Configuration errors and warnings, each pointing at `FILE:LINE:COLUMN` of the offending value.

use std::fmt;
use std::ops::Range;

/// A position in the configuration file, 1-based, as editors show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file as the user named it.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

impl Location {
    /// Turns a byte span of `source` into a line and column.
    pub fn from_span(file: &str, source: &str, span: Range<usize>) -> Self {
        let start = span.start.min(source.len());
        let before = &source[..start];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = source[line_start..start].chars().count() + 1;
        Location {
            file: file.to_string(),
            line,
            column,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// Why a configuration file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read at all (it does not exist, say).
    #[error("{file}: {}", read_failure(source))]
    Read {
        /// The file as the user named it.
        file: String,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The file was read but a value in it is wrong.
    #[error("{at}: {message}")]
    Invalid {
        /// Where the offending value is.
        at: Location,
        /// What is wrong with it, naming the key.
        message: String,
    },
}

/// Reads a configuration file (TOML or YAML) as text. A file that is not UTF-8 is refused at
/// the first byte that is not, as `FILE:LINE:COLUMN`, like any other mistake in it.
pub fn read_text(path: &std::path::Path) -> Result<String, ConfigError> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| ConfigError::Read {
        file: file.clone(),
        source,
    })?;
    String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let before = String::from_utf8_lossy(&e.as_bytes()[..valid]);
        ConfigError::Invalid {
            at: Location::from_span(&file, &before, before.len()..before.len()),
            message: "the file is not valid UTF-8 here (configuration files are UTF-8 text)"
                .to_string(),
        }
    })
}

/// Why a file could not be read, said plainly for the common cases.
fn read_failure(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file: the config file does not exist".to_string(),
        std::io::ErrorKind::PermissionDenied => {
            format!("cannot read the file: permission denied ({e})")
        }
        std::io::ErrorKind::IsADirectory => "is a directory, not a config file".to_string(),
        _ => format!("cannot read the file: {e}"),
    }
}

impl ConfigError {
    /// Where the error points, when it points into the file.
    pub fn location(&self) -> Option<&Location> {
        match self {
            ConfigError::Read { .. } => None,
            ConfigError::Invalid { at, .. } => Some(at),
        }
    }
}

/// A setting that is accepted but has no effect, such as `max_delay` on a `reject` route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    /// Where the ignored setting is.
    pub at: Location,
    /// What is ignored and why.
    pub message: String,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: warning: {}", self.at, self.message)
    }
}

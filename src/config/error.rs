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

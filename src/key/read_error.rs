//! Why a part the request carries gives no value: named twice, or read differently by
//! different parsers.

/// Why a part the request carries gives no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// Named twice, or in a spelling some framework folds into its name, or in the query too.
    Ambiguous,
    /// Present, but read differently by different parsers (a JSON number that is not a plain
    /// integer below 2^53).
    Unclear {
        /// What it must be.
        what: &'static str,
        /// The value as written (a JSON number's text).
        written: String,
    },
}

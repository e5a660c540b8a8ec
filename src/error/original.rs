//! Why a forward-auth subrequest (or an ext_authz check) does not say which request it asks
//! about: the error owns what it reports, so the error module needs nothing of the listeners.

/// Why a subrequest does not say which request it asks about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginalError {
    /// Neither `X-Forwarded-Uri` nor `X-Original-URI`.
    #[error("the subrequest names no original request: send X-Forwarded-Uri (or X-Original-URI) with the URI the client asked for")]
    MissingUri,
    /// The original URI, or the original method, cannot be read.
    #[error("the original request cannot be read: {0}")]
    BadOriginal(String),
    /// The headers name two different original URIs, or methods (the one named here).
    #[error("the subrequest names two different original {0}s (X-Forwarded-* and X-Original-*, or one of them twice): the proxy must send one")]
    Ambiguous(&'static str),
}

impl OriginalError {
    /// The problem body's `error` code.
    pub fn code(&self) -> &'static str {
        match self {
            OriginalError::MissingUri => "missing_original_uri",
            OriginalError::BadOriginal(_) => "bad_original_request",
            OriginalError::Ambiguous(_) => "ambiguous_original_request",
        }
    }
}

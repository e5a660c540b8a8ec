//! Routing, the first step of the request path: [`admit`] refuses what must not go further (a
//! head over the bounds, a path without one safe spelling), joins an HTTP/2 request's cookie
//! fields into one (`cookies.rs`), normalises the path ([`normalize`]) and matches it against the routes of the [`RouteTable`] in file order (paths
//! ignoring ASCII case unless `server.path_case = "sensitive"`, in their routing form: segments'
//! `;` parameters ignored, escapes read as frameworks read them, [`routing_form`]; methods
//! ignoring case, `HEAD` by a route that takes `GET`). Everything after this step (keys,
//! limits, the forwarded request) sees only the normalised path.

mod cookies;
mod table;

pub use crate::path::{normalize, routing_form, PathError};
pub use cookies::join_http2 as join_http2_cookies;
pub use table::{Carried, CompileError, Route, RouteTable};

use std::borrow::Cow;
use std::sync::Arc;

use http::request::Parts;
use http::uri::{PathAndQuery, Uri};

/// Why a request is refused before it has a route.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// The request path has no safe normal form.
    #[error("{0}")]
    BadPath(#[from] PathError),
    /// `Host` missing from an HTTP/1.1 request, sent twice, or not a host (RFC 9112 3.2).
    #[error("{0}")]
    BadHost(&'static str),
    /// The request head is larger than the gateway accepts.
    #[error("the request head has {what}; the most is {max}")]
    HeadTooLarge {
        /// What was too large ("18000 bytes", "140 header fields").
        what: String,
        /// The bound.
        max: String,
    },
    /// A transfer coding other than `chunked` (`gzip, chunked`): the gateway would forward the
    /// body without it, another request than the one sent (RFC 9112 6.1).
    #[error("the transfer coding `{0}` is not implemented; only `chunked` is")]
    TransferCoding(String),
    /// `chunked` named more than once (`chunked, chunked`), which no sender may do (RFC 9112
    /// 6.1): a malformed request, not a coding the gateway lacks.
    #[error("`Transfer-Encoding` names `chunked` more than once; it is applied once at most")]
    ChunkedTwice,
    /// No route takes this method and path.
    #[error("no route matches {method} {path}")]
    NoRoute {
        /// Request method.
        method: String,
        /// Request path (normalised).
        path: String,
    },
}

/// Replaces the path of `uri` by its normal form, keeping the query as it is.
pub fn normalize_uri(uri: &mut Uri) -> Result<(), PathError> {
    let Cow::Owned(path) = normalize(uri.path())? else {
        return Ok(());
    };
    let path_and_query = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path,
    };
    let mut parts = std::mem::take(uri).into_parts();
    parts.path_and_query = Some(
        PathAndQuery::try_from(path_and_query)
            .expect("a normalised path is made of characters the request line had"),
    );
    *uri = Uri::from_parts(parts).expect("only the path changed");
    Ok(())
}

/// The checks before routing, then the route: a path with one safe spelling (which replaces the
/// one sent), matched in its routing form (without its `;` parameters, one spelling of each
/// escape). For the gateway's proxy listener (`proxy`), first the head within its server's
/// bounds and a transfer coding it can forward, and routes without an upstream (forward
/// auth's alone) are passed over; an embedded layer leaves those to the service it wraps,
/// whose server has its own. (Conflicting framing never gets this far: hyper
/// decodes a request with both `Content-Length` and `Transfer-Encoding` by the latter alone,
/// drops the former and closes the connection after the answer, as RFC 9112 6.1 allows.)
pub fn admit<'t>(
    table: &'t RouteTable,
    head: &mut Parts,
    proxy: bool,
) -> Result<&'t Arc<Route>, RouteError> {
    // split cookie fields are one field, as an HTTP/1.1 client sends them
    cookies::join_http2(head.version, &mut head.headers);
    if proxy {
        within_bounds(&table.config.server, head)?;
        only_chunked(&head.headers)?;
    }
    normalize_uri(&mut head.uri)?;
    let routed = routing_form(head.uri.path())?;
    table
        .find(&head.method, &routed, proxy)
        .ok_or_else(|| RouteError::NoRoute {
            method: head.method.to_string(),
            path: head.uri.path().to_string(),
        })
}

/// The head within the server's bounds: its fields (`max_headers`) and its bytes, the target
/// included (`max_header_bytes`).
fn within_bounds(server: &crate::config::ServerConfig, head: &Parts) -> Result<(), RouteError> {
    if head.headers.len() > server.max_headers {
        return Err(RouteError::HeadTooLarge {
            what: format!("{} header fields", head.headers.len()),
            max: format!("{}", server.max_headers),
        });
    }
    let head_bytes: usize = head.uri.path_and_query().map_or(1, |p| p.as_str().len())
        + head
            .headers
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + 4)
            .sum::<usize>();
    if head_bytes > server.max_header_bytes {
        return Err(RouteError::HeadTooLarge {
            what: format!("{head_bytes} bytes"),
            max: format!("{} bytes", server.max_header_bytes),
        });
    }
    Ok(())
}

/// A request's `Transfer-Encoding` names `chunked` alone, if it is sent (hyper decodes the
/// chunks and nothing else, as NGINX, which answers 501 to any other coding).
fn only_chunked(headers: &http::HeaderMap) -> Result<(), RouteError> {
    let codings = headers
        .get_all(http::header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|line| line.as_bytes().split(|&b| b == b','))
        .map(|coding| coding.trim_ascii());
    let mut chunked = false;
    for coding in codings {
        if !coding.eq_ignore_ascii_case(b"chunked") {
            let text = String::from_utf8_lossy(coding).into_owned();
            return Err(RouteError::TransferCoding(text));
        }
        if std::mem::replace(&mut chunked, true) {
            return Err(RouteError::ChunkedTwice);
        }
    }
    Ok(())
}

/// RFC 9112 3.2: an HTTP/1.1 request has exactly one `Host` (an HTTP/2 one names its authority
/// in `:authority` instead), and a `Host`, like a target's authority, is a host with an
/// optional port. Empty is allowed (a
/// target without an authority). The gateway's own server checks it on every request before the
/// layer; an embedded layer leaves it to its app's server (requests made in process often
/// carry no `Host`).
pub fn check_host<B>(req: &http::Request<B>) -> Result<(), RouteError> {
    // An absolute-form target's authority, or HTTP/2's `:authority`, is the host the upstream
    // is told of (`X-Forwarded-Host`): the same rule, so no userinfo (`a:80@evil.example`)
    // or port beyond 65535 gets there.
    if let Some(authority) = req.uri().authority() {
        if !crate::host::is_host_and_port(authority.as_str()) {
            return Err(RouteError::BadHost(
                "the request target's authority is not a host[:port]",
            ));
        }
    }
    let mut hosts = req.headers().get_all(http::header::HOST).iter();
    let Some(host) = hosts.next() else {
        return match req.version() {
            http::Version::HTTP_11 => Err(RouteError::BadHost("the request has no Host header")),
            _ => Ok(()),
        };
    };
    if hosts.next().is_some() {
        return Err(RouteError::BadHost(
            "the request has more than one Host header",
        ));
    }
    let written = host.to_str().unwrap_or(" ");
    if !host.is_empty() && !crate::host::is_host_and_port(written) {
        return Err(RouteError::BadHost("the Host header is not a host[:port]"));
    }
    Ok(())
}

//! Routing, the first step of the request path: the request path is normalised
//! ([`normalize`]), then matched against the routes of the [`RouteTable`] in file order, and the
//! later steps get what they need from the matched route ([`RouteLayer`]). Everything after this
//! step (keys, limits, the forwarded request) sees only the normalised path.

mod normalize;
mod service;
mod table;

pub use normalize::{normalize, PathError};
pub use service::{PeerAddr, RouteLayer, Router};
pub use table::{Carried, CompileError, Route, RouteTable};

use std::borrow::Cow;

use http::uri::{PathAndQuery, Uri};

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

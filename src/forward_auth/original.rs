//! The request a forward-auth subrequest asks about: its method and URI from the headers the
//! proxy in front sends (`X-Forwarded-Method`/`X-Forwarded-Uri`: Caddy, Traefik;
//! `X-Original-Method`/`X-Original-URI`: NGINX's convention), its other headers as passed
//! along, and its body when the subrequest carries one: Traefik's `forwardBody: true` sends the
//! original body with its `Content-Length`, and so may any proxy (a subrequest whose body is
//! not over with its head carries one). A subrequest without a body
//! (NGINX `auth_request`, Caddy `forward_auth`) asks about a request whose body key parts are
//! missing.
//!
//! Without an original URI the subrequest is refused (400): deciding for the subrequest's own
//! path would count nothing the client asked for. So is one that names two different originals
//! (both conventions, or one header twice): NGINX passes the client's own headers to its
//! subrequest, so a client could add an `X-Forwarded-Uri` beside the proxy's `X-Original-URI`
//! and have another request counted than the one it sends. An absolute URI (`http://host/path`) is read
//! for its path and query, as an absolute-form request target is on the traffic path; the path
//! is then normalised and matched exactly as there.
//!
//! The original's host comes with its URI's convention. Caddy and Traefik make the subrequest
//! a request of their own, to the auth address (Traefik's `Host` is that address), and name the
//! host the client asked for in `X-Forwarded-Host`, set by them in place of any the client sent:
//! with `X-Forwarded-Uri`, that is the original's `Host`. NGINX passes the client's own headers
//! along, `X-Forwarded-Host` included, and its recipe sets `Host $host`: with `X-Original-URI`,
//! the subrequest's `Host` is the original's. Of a list (`a, b`, or the header twice), the last
//! is the one the proxy that asks set.

use http::header::{
    HeaderName, HeaderValue, CONTENT_ENCODING, CONTENT_LENGTH, EXPECT, HOST, TRANSFER_ENCODING,
};
use http::request::Parts;
use http::{HeaderMap, Method, Request, Uri};

use crate::error::OriginalError;

/// `X-Forwarded-Method` (Caddy, Traefik).
pub static X_FORWARDED_METHOD: HeaderName = HeaderName::from_static("x-forwarded-method");
/// `X-Forwarded-Uri` (Caddy, Traefik).
pub static X_FORWARDED_URI: HeaderName = HeaderName::from_static("x-forwarded-uri");
/// `X-Original-Method` (NGINX, set in its `auth_request` location).
pub static X_ORIGINAL_METHOD: HeaderName = HeaderName::from_static("x-original-method");
/// `X-Original-URI` (NGINX, set in its `auth_request` location).
pub static X_ORIGINAL_URI: HeaderName = HeaderName::from_static("x-original-uri");
/// `X-Forwarded-Host` (Caddy, Traefik: the host the client asked for).
pub static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// The original request of a subrequest (`head` and `body`): the body is the original's when
/// the subrequest carries one (its framing headers kept), else empty.
pub fn original<B: http_body::Body>(head: &Parts, body: B) -> Result<Request<B>, OriginalError> {
    let headers = &head.headers;
    let uri_value = the_one_of(headers, &X_FORWARDED_URI, &X_ORIGINAL_URI, "URI")?
        .ok_or(OriginalError::MissingUri)?;
    let uri = origin_form(uri_value)?;
    let method = match the_one_of(headers, &X_FORWARDED_METHOD, &X_ORIGINAL_METHOD, "method")? {
        Some(m) => Method::from_bytes(m.as_bytes()).map_err(|_| {
            OriginalError::BadOriginal(format!(
                "`{}` is not a method",
                String::from_utf8_lossy(m.as_bytes())
            ))
        })?,
        // NGINX's subrequest keeps the client's method when the recipe sets none.
        None => head.method.clone(),
    };
    let with_body = !body.is_end_stream();
    let mut request = Request::new(body);
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = http::Version::HTTP_11;
    let kept = request.headers_mut();
    for (name, value) in headers {
        // Without a body, the subrequest's framing is not the original's; with one, it is the
        // body's (the proxy sends the original body as it is).
        let framing = [CONTENT_LENGTH, TRANSFER_ENCODING, CONTENT_ENCODING].contains(name);
        if *name != EXPECT && (with_body || !framing) {
            kept.append(name, value.clone());
        }
    }
    match forwarded_host(headers) {
        // the client asked for no host (HTTP/1.0): a host key part is missing, as it would be
        Some([]) => drop(kept.remove(HOST)),
        Some(host) => {
            let host = HeaderValue::from_bytes(host).map_err(|_| {
                OriginalError::BadOriginal("`X-Forwarded-Host` is not a host".into())
            })?;
            kept.insert(HOST, host);
        }
        None => {}
    }
    // read as HTTP/1.1 from here on: a subrequest that came over HTTP/2 joins its cookie
    // fields first, as the traffic path does
    crate::route::join_http2_cookies(head.version, request.headers_mut());
    Ok(request)
}

/// The one value the subrequest gives under either of two header names (`None` without
/// either); two different values are ambiguous (`what` names them in the error).
fn the_one_of<'h>(
    headers: &'h HeaderMap,
    first: &HeaderName,
    second: &HeaderName,
    what: &'static str,
) -> Result<Option<&'h http::HeaderValue>, OriginalError> {
    let mut values = headers.get_all(first).iter().chain(headers.get_all(second));
    let Some(value) = values.next() else {
        return Ok(None);
    };
    match values.all(|other| other == value) {
        true => Ok(Some(value)),
        false => Err(OriginalError::Ambiguous(what)),
    }
}

/// The original's host when the subrequest names it apart from its own `Host`: the last
/// `X-Forwarded-Host` of a Caddy or Traefik subrequest (`X-Forwarded-Uri`, no `X-Original-URI`).
fn forwarded_host(headers: &HeaderMap) -> Option<&[u8]> {
    if headers.contains_key(&X_ORIGINAL_URI) {
        return None;
    }
    let last = headers.get_all(&X_FORWARDED_HOST).iter().next_back()?;
    last.as_bytes()
        .rsplit(|&b| b == b',')
        .next()
        .map(<[u8]>::trim_ascii)
}

/// The original URI as an origin-form target (path and query).
fn origin_form(value: &http::HeaderValue) -> Result<Uri, OriginalError> {
    let text = value.to_str().unwrap_or("");
    let bad = || OriginalError::BadOriginal(format!("`{}` is not a request URI", text));
    let uri: Uri = text.parse().map_err(|_| bad())?;
    let path_and_query = uri.path_and_query().ok_or_else(bad)?;
    if !path_and_query.as_str().starts_with('/') {
        return Err(bad());
    }
    Uri::builder()
        .path_and_query(path_and_query.clone())
        .build()
        .map_err(|_| bad())
}

//! Paths as the gateway reads them: [`normalize`] gives the one spelling of a request's path
//! that routing, keying and forwarding all see ([`normal`]), and [`routing_form`] the form
//! routes and the `path` key part compare, which also reads every spelling a framework routes
//! the same way as one ([`routed`]).

mod normal;
mod routed;

pub use normal::{hex_value, is_unreserved, normalize, PathError};
pub use routed::routing_form;

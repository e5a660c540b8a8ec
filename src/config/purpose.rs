//! What a config file configures: the gateway, or a rate-limit layer in another service.

/// What the file configures: the gateway (every route names an upstream) or a rate-limit
/// layer embedded in another service (routes have no upstream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// `slidegate` itself.
    Gateway,
    /// `slidegate::RateLimitLayer` in front of someone's service.
    Layer,
}

impl Purpose {
    /// What a config file's text is for when nobody says: a layer file when it has routes,
    /// none of which names an `upstream`, no `[upstreams]`, and no listener that only the
    /// gateway serves (`[forward_auth]`, `[rls]`, `[ext_authz]`: a forward-auth gateway's routes need no
    /// upstream); the gateway's otherwise (text that does not parse too, so its errors are the
    /// gateway's).
    pub fn detect(text: &str) -> Purpose {
        let Ok(doc) = text.parse::<toml::Table>() else {
            return Purpose::Gateway;
        };
        let routes = doc.get("routes").and_then(toml::Value::as_array);
        let upstream_free = routes.is_some_and(|routes| {
            !routes.is_empty()
                && routes
                    .iter()
                    .all(|r| r.as_table().is_some_and(|t| !t.contains_key("upstream")))
        });
        let gateway_only = ["upstreams", "forward_auth", "rls", "ext_authz"]
            .iter()
            .any(|section| doc.contains_key(*section));
        match upstream_free && !gateway_only {
            true => Purpose::Layer,
            false => Purpose::Gateway,
        }
    }
}

//! Redis URLs as the spec writes them, turned into the form the client library takes:
//! `redis-cluster://h1:p1,h2:p2` and `redis-sentinel://h1:p1,h2:p2/service` list every seed host
//! in the authority; the library takes the first host there and the rest as `node=` parameters.

/// Rewrites the spec's multi-host URLs into fred's form:
/// `redis-cluster://h1:p1,h2:p2` -> `redis-cluster://h1:p1?node=h2:p2`, and
/// `redis-sentinel://h1:p1,h2:p2/name` -> `redis-sentinel://h1:p1?node=h2:p2&sentinelServiceName=name`.
pub fn fred_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match rest.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (rest, None),
    };
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let mut hosts = hosts.split(',').filter(|h| !h.is_empty());
    let first = hosts.next().unwrap_or("127.0.0.1:6379");
    let mut params: Vec<String> = hosts.map(|h| format!("node={h}")).collect();
    let sentinel = scheme.ends_with("-sentinel");
    let mut path_part = String::new();
    match path {
        Some(p) if sentinel && !p.is_empty() && p.parse::<u32>().is_err() => {
            params.push(format!("sentinelServiceName={p}"));
        }
        Some(p) if !p.is_empty() => path_part = format!("/{p}"),
        _ => {}
    }
    if let Some(q) = query {
        params.push(q.to_string());
    }
    let user = userinfo.map_or(String::new(), |u| format!("{u}@"));
    let query = if params.is_empty() {
        String::new()
    } else {
        format!("?{}", params.join("&"))
    };
    format!("{scheme}://{user}{first}{path_part}{query}")
}

#[cfg(test)]
mod tests {
    use super::fred_url;

    #[test]
    fn multi_host_urls_become_node_params() {
        assert_eq!(fred_url("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(
            fred_url("redis-cluster://127.0.0.1:7000,127.0.0.1:7001"),
            "redis-cluster://127.0.0.1:7000?node=127.0.0.1:7001"
        );
        assert_eq!(
            fred_url("redis-sentinel://:pw@10.0.0.1:26379,10.0.0.2:26379/mymaster"),
            "redis-sentinel://:pw@10.0.0.1:26379?node=10.0.0.2:26379&sentinelServiceName=mymaster"
        );
    }
}

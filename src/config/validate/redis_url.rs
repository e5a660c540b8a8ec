//! What the store's URL may be: a Redis scheme the store takes, with hosts and (for a plain
//! Redis URL) a database; and no credentials of the sentinels' own, which the client is built
//! without (it asks the sentinels with the store's own): refused, not silently ignored.

/// Whether `url` has one of the Redis schemes the store takes, and hosts (several, comma
/// separated, for a cluster or the sentinels) whose ports, when given, are ports; a plain
/// Redis URL's path, when given, is a database number (a sentinel URL's names the service):
/// what the client would refuse at start is refused here, with its location.
fn is_redis_url(url: &str) -> bool {
    const SCHEMES: [(&str, bool); 6] = [
        ("redis://", true),
        ("rediss://", true),
        ("redis-cluster://", false),
        ("rediss-cluster://", false),
        ("redis-sentinel://", false),
        ("rediss-sentinel://", false),
    ];
    let Some((rest, database_path)) = SCHEMES
        .iter()
        .find_map(|(s, db)| url.strip_prefix(s).map(|rest| (rest, *db)))
    else {
        return false;
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let hosts = authority.rsplit('@').next().unwrap_or("");
    let database = tail
        .strip_prefix('/')
        .map(|t| t.split('?').next().unwrap_or(""));
    hosts.split(',').all(crate::host::is_host_and_port)
        && (!database_path || database.is_none_or(|db| db.is_empty() || db.parse::<u8>().is_ok()))
}

/// Why a URL that is none of the store's schemes is refused.
const NOT_REDIS: &str =
    "is not a Redis URL (redis://, rediss://, redis-cluster://, redis-sentinel://)";

/// Why a sentinel URL with credentials of the sentinels' own is refused.
const SENTINEL_CREDENTIALS: &str = "names credentials of the sentinels' own (sentinelUsername, sentinelPassword): the sentinels are asked with the store's own username and password; give the sentinels the same ones (`requirepass` and `sentinel auth-pass`) and drop these parameters";

/// Why a URL with a query parameter the client does not read is refused: it would be ignored
/// (a `password=` there would leave the store refusing every call, and every route to its
/// `on_error`).
const UNKNOWN_PARAMETER: &str = "has a query parameter the store does not read (it reads `node=host:port` and `sentinelServiceName`); a password goes before the host: `redis://:PASSWORD@host:6379`";

/// Why `url` cannot be the store's (`None`: it can).
pub fn redis_url_fault(url: &str) -> Option<&'static str> {
    if !is_redis_url(url) {
        return Some(NOT_REDIS);
    }
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let names = query.split('&').filter(|p| !p.is_empty());
    let names: Vec<&str> = names.map(|p| p.split('=').next().unwrap_or(p)).collect();
    let own = |name: &&str| matches!(*name, "sentinelUsername" | "sentinelPassword");
    if names.iter().any(own) {
        return Some(SENTINEL_CREDENTIALS);
    }
    let read = |name: &&str| matches!(*name, "node" | "sentinelServiceName");
    (!names.iter().all(read)).then_some(UNKNOWN_PARAMETER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_parameter_the_client_ignores_is_refused() {
        for url in [
            "redis://127.0.0.1:6379/0?password=pw",
            "redis://127.0.0.1:6379?db=3",
            "redis-cluster://a:1?node=b:2&username=x",
        ] {
            assert_eq!(redis_url_fault(url), Some(UNKNOWN_PARAMETER), "{url}");
        }
        for url in [
            "redis://127.0.0.1:6379/0",
            "redis://127.0.0.1:6379/0?",
            "redis-cluster://a:1?node=b:2&node=c:3",
            "redis-sentinel://a:1?sentinelServiceName=m&node=b:2",
        ] {
            assert_eq!(redis_url_fault(url), None, "{url}");
        }
    }
}

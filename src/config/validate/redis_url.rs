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

/// Why `url` cannot be the store's (`None`: it can).
pub fn redis_url_fault(url: &str) -> Option<&'static str> {
    if !is_redis_url(url) {
        return Some(NOT_REDIS);
    }
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let own = |p: &str| p.starts_with("sentinelUsername=") || p.starts_with("sentinelPassword=");
    query.split('&').any(own).then_some(SENTINEL_CREDENTIALS)
}

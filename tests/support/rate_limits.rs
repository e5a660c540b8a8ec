//! A route of the rate-limit tests (every path, one key, its limits), and a gateway deciding its
//! routes in a real Redis.

use super::gateway::{self, config, redis_store, Gateway};
use super::redis::RedisServer;

pub fn route(name: &str, key: &str, extra: &str, limits: &[(&str, u64, &str)]) -> String {
    let mut out = format!(
        "[[routes]]\nname = \"{name}\"\npath = \"/*\"\nupstream = \"up\"\nkey = [{key}]\n{extra}\n"
    );
    for (n, l, w) in limits {
        out.push_str(&format!(
            "  [[routes.limits]]\n  name = \"{n}\"\n  limit = {l}\n  window = \"{w}\"\n"
        ));
    }
    out
}

/// A gateway with `routes` in front of `upstream`, deciding in `redis` under `prefix`.
pub async fn on_redis(redis: &RedisServer, prefix: &str, upstream: &str, routes: &str) -> Gateway {
    gateway::start(&config(
        &redis_store(&redis.url(), prefix),
        upstream,
        routes,
    ))
    .await
}

//! What the admin tests share: a route with two limits on a header key, and the bearer-token
//! header of the admin token.

use super::gateway::TOKEN;

pub const ROUTES: &str = r#"
[[routes]]
name = "campaign-email"
path = "/*"
upstream = "up"
key = ["header:X-User"]
  [[routes.limits]]
  name = "per-day"
  limit = 2
  window = "1d"
  [[routes.limits]]
  name = "per-week"
  limit = 5
  window = "7d"
"#;

pub fn auth() -> (&'static str, String) {
    ("authorization", format!("Bearer {TOKEN}"))
}

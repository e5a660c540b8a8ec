//! `RateLimitLayer::builder()` takes what a layer file takes for keys and tiers (README,
//! "Embedding: the tower layer"): `[jwt]` for `jwt:` key parts, segments (in the order added)
//! and plans. Alone in its file: it sets a variable of the process environment, which no other
//! test of this binary reads meanwhile.

use std::convert::Infallible;
use std::net::IpAddr;

use axum::body::Bytes;
use http_body_util::Full;
use slidegate::layer::{ClientAddr, RequestBody, RouteBuilder};
use slidegate::RateLimitLayer;

/// A builder takes what the file takes for keys and tiers: `[jwt]` (here an HS256 secret from
/// a variable, for a `jwt:sub` key) and `[segments.NAME]` (a segment's own value of a limit).
/// User 7 is in the segment "new" (1 a minute), user 8 is not (3 a minute), and a forged
/// token is a missing key (400).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_builder_takes_jwt_keys_and_segments() {
    use tower::{Layer, ServiceExt};
    const SECRET_ENV: &str = "SLIDEGATE_TEST_BUILDER_JWT_SECRET";
    const SECRET: &str = "builder-secret-of-thirty-two-bytes!";
    // set before the layer reads the environment; no other test runs in this binary
    std::env::set_var(SECRET_ENV, SECRET);
    let dir = tempfile::tempdir().unwrap();
    let new_users = dir.path().join("new.roaring");
    slidegate::tier::write_segment([7], &new_users).unwrap();
    let mut per_user = toml::Table::new();
    per_user.insert("name".into(), "per-user".into());
    per_user.insert("limit".into(), 3.into());
    per_user.insert("window".into(), "1m".into());
    let mut segments = toml::Table::new();
    segments.insert("new".into(), 1.into());
    per_user.insert("segments".into(), segments.into());
    let layer = RateLimitLayer::builder()
        .memory()
        .jwt("hs256_secret_env", SECRET_ENV)
        .segment("new", new_users.to_str().unwrap())
        .route(
            RouteBuilder::new("api", "/api/*")
                .key(&["jwt:sub"])
                .limit_table(per_user),
        )
        .build()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let inner = tower::service_fn(|_req: http::Request<RequestBody<Full<Bytes>>>| async {
        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
    });
    let service = layer.layer(inner);
    let call = |sub: &'static str, secret: &'static str| {
        let service = service.clone();
        async move {
            let claims = serde_json::json!({ "sub": sub });
            let key = jsonwebtoken::EncodingKey::from_secret(secret.as_bytes());
            let token = jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key);
            let mut req = http::Request::get("/api/items")
                .header("authorization", format!("Bearer {}", token.unwrap()))
                .body(Full::new(Bytes::new()))
                .unwrap();
            req.extensions_mut()
                .insert(ClientAddr(IpAddr::from([192, 0, 2, 1])));
            service.oneshot(req).await.unwrap().status().as_u16()
        }
    };
    let mut statuses = Vec::new();
    for sub in ["7", "7", "8", "8", "8", "8"] {
        statuses.push(call(sub, SECRET).await);
    }
    assert_eq!(statuses, [200, 429, 200, 200, 200, 429]);
    assert_eq!(call("9", "forged").await, 400, "a forged token has no sub");
    // segments keep the order they were added in: the first that holds an id applies
    let text = RateLimitLayer::builder()
        .segment("zeta", "z.roaring")
        .segment("alpha", "a.roaring")
        .to_toml();
    let (zeta, alpha) = (text.find("[segments.zeta]"), text.find("[segments.alpha]"));
    assert!(zeta.is_some() && zeta < alpha, "{text}");
}

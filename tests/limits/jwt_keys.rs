//! `jwt:CLAIM` key parts: claims come only from tokens whose signature verifies (HS256 secret or
//! ES256 public key), with issuer and audience checked when set (a token must then carry them),
//! that carry `exp` when
//! `jwt.require_exp = true`, are not expired and are past their `nbf`; anything else is a
//! missing key. Two `Authorization` lines are ambiguous, as any key header sent twice.

use crate::support;

use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::json;
use support::http::HttpClient;
use support::upstream;

const ROUTES: &str = r#"
[[routes]]
name = "api"
path = "/*"
upstream = "up"
key = ["jwt:sub"]
  [[routes.limits]]
  name = "per-minute"
  limit = 2
  window = "1m"
"#;

async fn start(
    jwt_section: &str,
    dir: &std::path::Path,
) -> (slidegate::app::Running, upstream::Upstream) {
    let up = upstream::start().await;
    let toml = support::gateway::config("backend = \"memory\"", &up.url(), ROUTES) + jwt_section;
    let path = dir.join("config.toml");
    std::fs::write(&path, toml).unwrap();
    let env = |name: &str| match name {
        "JWT_SECRET" => Some("s3cret".to_string()),
        "SLIDEGATE_ADMIN_TOKEN" => Some(support::gateway::TOKEN.to_string()),
        _ => None,
    };
    let config = slidegate::config::Config::load_with_env(&path, env).unwrap();
    (slidegate::app::start(config).await.unwrap(), up)
}

fn exp() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600
}

fn hs256(claims: serde_json::Value, secret: &str) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hs256_claims_key_the_limit_and_forged_tokens_count_as_missing() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _up) = start("\n[jwt]\nhs256_secret_env = \"JWT_SECRET\"\nissuer = \"https://auth.example.com\"\naudience = \"api\"\n", dir.path()).await;
    let url = format!("http://{}/x", gw.proxy_addr);
    let client = HttpClient::default();
    let good = |sub: &str| {
        hs256(
            json!({"sub": sub, "iss": "https://auth.example.com", "aud": "api", "exp": exp()}),
            "s3cret",
        )
    };
    let alice = format!("Bearer {}", good("alice"));
    let bob = format!("Bearer {}", good("bob"));
    assert_eq!(client.status(&url, &[("authorization", &alice)]).await, 200);
    assert_eq!(client.status(&url, &[("authorization", &alice)]).await, 200);
    assert_eq!(client.status(&url, &[("authorization", &alice)]).await, 429);
    assert_eq!(
        client.status(&url, &[("authorization", &bob)]).await,
        200,
        "bob has his own quota"
    );
    // two tokens: the upstream may act on either (HAProxy's `req.hdr()` takes the last), so
    // bob's must not pay for alice's
    let r = client
        .get(&url, &[("authorization", &bob), ("authorization", &alice)])
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"], "ambiguous_key");

    let forged = format!(
        "Bearer {}",
        hs256(
            json!({"sub": "carol", "iss": "https://auth.example.com", "aud": "api", "exp": exp()}),
            "guess"
        )
    );
    let wrong_aud = format!(
        "Bearer {}",
        hs256(
            json!({"sub": "dave", "iss": "https://auth.example.com", "aud": "other", "exp": exp()}),
            "s3cret"
        )
    );
    let expired = format!(
        "Bearer {}",
        hs256(
            json!({"sub": "erin", "iss": "https://auth.example.com", "aud": "api", "exp": 1000}),
            "s3cret"
        )
    );
    // issuer and audience are set, so a token must name them: one that leaves either out was
    // not issued for this gateway (another service's token under a shared secret)
    let no_aud = format!(
        "Bearer {}",
        hs256(
            json!({"sub": "frank", "iss": "https://auth.example.com", "exp": exp()}),
            "s3cret"
        )
    );
    let no_iss = format!(
        "Bearer {}",
        hs256(
            json!({"sub": "grace", "aud": "api", "exp": exp()}),
            "s3cret"
        )
    );
    for token in [
        forged,
        wrong_aud,
        expired,
        no_aud,
        no_iss,
        "Bearer not.a.jwt".to_string(),
    ] {
        let r = client.get(&url, &[("authorization", &token)]).await;
        assert_eq!(
            r.status, 400,
            "an unverifiable token is a missing key: {token}"
        );
        assert_eq!(r.json()["error"], "missing_key");
    }
    assert_eq!(client.status(&url, &[]).await, 400);
    // `/admin/config` names the secret's variable as the file does, never the secret
    let (k, v) = support::admin::auth();
    let view = client
        .get(
            &format!("http://{}/admin/config", gw.admin_addr),
            &[(k, &v)],
        )
        .await;
    assert_eq!(
        view.json()["jwt"]["hs256_secret_env"],
        "JWT_SECRET",
        "{}",
        view.body
    );
    assert!(!view.body.contains("s3cret"), "{}", view.body);
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn es256_tokens_verify_against_the_public_key_file() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/jwt");
    std::fs::copy(
        fixtures.join("es256-public.pem"),
        dir.path().join("jwt.pem"),
    )
    .unwrap();
    let (gw, _up) = start("\n[jwt]\npublic_key_file = \"jwt.pem\"\n", dir.path()).await;
    let url = format!("http://{}/x", gw.proxy_addr);
    let private = std::fs::read(fixtures.join("es256-private-pkcs8.pem")).unwrap();
    let key = EncodingKey::from_ec_pem(&private).unwrap();
    let token = encode(
        &Header::new(Algorithm::ES256),
        &json!({"sub": 42, "exp": exp()}),
        &key,
    )
    .unwrap();
    let client = HttpClient::default();
    let auth = format!("Bearer {token}");
    assert_eq!(client.status(&url, &[("authorization", &auth)]).await, 200);
    assert_eq!(client.status(&url, &[("authorization", &auth)]).await, 200);
    assert_eq!(
        client.status(&url, &[("authorization", &auth)]).await,
        429,
        "numeric sub keys the limit"
    );
    let hs = format!(
        "Bearer {}",
        hs256(json!({"sub": "x", "exp": exp()}), "anything")
    );
    assert_eq!(
        client.status(&url, &[("authorization", &hs)]).await,
        400,
        "algorithm confusion is refused"
    );
    gw.shutdown().await;
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_exp_keys_requests_unless_require_exp_is_true() {
    let no_exp = format!("Bearer {}", hs256(json!({"sub": "alice"}), "s3cret"));
    let with_exp = format!(
        "Bearer {}",
        hs256(json!({"sub": "alice", "exp": exp()}), "s3cret")
    );
    let expired = format!(
        "Bearer {}",
        hs256(json!({"sub": "alice", "exp": now() - 3600}), "s3cret")
    );
    let client = HttpClient::default();

    let dir = tempfile::tempdir().unwrap();
    let (gw, _up) = start("\n[jwt]\nhs256_secret_env = \"JWT_SECRET\"\n", dir.path()).await;
    let url = format!("http://{}/x", gw.proxy_addr);
    let codes = [
        client.status(&url, &[("authorization", &no_exp)]).await,
        client.status(&url, &[("authorization", &no_exp)]).await,
        client.status(&url, &[("authorization", &no_exp)]).await,
    ];
    assert_eq!(
        codes,
        [200, 200, 429],
        "by default the claims of a token without exp key the limit"
    );
    let r = client.get(&url, &[("authorization", &expired)]).await;
    assert_eq!(r.status, 400, "an exp that is present is still checked");
    assert_eq!(r.json()["error"], "missing_key");
    gw.shutdown().await;

    let dir = tempfile::tempdir().unwrap();
    let (gw, _up) = start(
        "\n[jwt]\nhs256_secret_env = \"JWT_SECRET\"\nrequire_exp = true\n",
        dir.path(),
    )
    .await;
    let url = format!("http://{}/x", gw.proxy_addr);
    let r = client.get(&url, &[("authorization", &no_exp)]).await;
    assert_eq!(
        r.status, 400,
        "require_exp = true refuses a token without exp"
    );
    assert_eq!(r.json()["error"], "missing_key");
    assert_eq!(
        client.status(&url, &[("authorization", &with_exp)]).await,
        200
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_that_is_not_yet_valid_is_a_missing_key() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _up) = start("\n[jwt]\nhs256_secret_env = \"JWT_SECRET\"\n", dir.path()).await;
    let url = format!("http://{}/x", gw.proxy_addr);
    let client = HttpClient::default();
    let future = format!(
        "Bearer {}",
        hs256(
            json!({"sub": "bob", "nbf": now() + 3600, "exp": now() + 7200}),
            "s3cret"
        )
    );
    let r = client.get(&url, &[("authorization", &future)]).await;
    assert_eq!(r.status, 400, "nbf an hour ahead");
    assert_eq!(r.json()["error"], "missing_key");
    let valid = format!(
        "Bearer {}",
        hs256(
            json!({"sub": "bob", "nbf": now() - 10, "exp": now() + 7200}),
            "s3cret"
        )
    );
    assert_eq!(client.status(&url, &[("authorization", &valid)]).await, 200);
    gw.shutdown().await;
}

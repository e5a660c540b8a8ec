//! `/admin/usage` by what a person knows (README, "Admin listener"): `value=` (once per key part) instead
//! of `key=`, the key derived as the traffic path derives it (normalised, cut, hashed), so a
//! support desk finds and lifts "Carol" or "0812 3456 7890" on hashed and unhashed keys, GET and
//! DELETE, and the count is really gone; and `DELETE` without `limit` on a route whose limits
//! count keys of their own resets every limit that held the key and says which.

use crate::support;

use http::Method;
use serde_json::{json, Value};
use support::admin::auth;
use support::http::{HttpClient, Reply};
use support::otp_login::{gateway_on, post, AuthUpstream, OTP_ROUTE};
use support::redis::RedisServer;

/// The OTP route (per-phone, hashed, and per-IP) with a per-operator limit added, a login route
/// keyed by a lower-cased username and a subscription route keyed by a hashed e-mail.
fn routes() -> String {
    format!("{OTP_ROUTE}{MORE_ROUTES}")
}

const MORE_ROUTES: &str = r#"
  [[routes.limits]]
  name = "per-operator"
  key = [{ part = "json:phone", normalize = "phone", region = "ID", prefix = 6 }]
  limit = 500
  window = "1h"

[[routes]]
name = "login"
path = "/api/login"
methods = ["POST"]
upstream = "up"
key = [{ part = "json:username", normalize = "lower" }]
  [[routes.limits]]
  name = "per-user"
  limit = 5
  window = "15m"

[[routes]]
name = "subscribe"
path = "/api/subscribe"
methods = ["POST"]
upstream = "up"
key = [{ part = "json:email", normalize = "email", hash = true }]
  [[routes.limits]]
  name = "per-email"
  limit = 2
  window = "1d"
"#;

/// The admin endpoint `path` with `query` pairs, URL-encoded.
fn admin_url(gw: &support::gateway::Gateway, path: &str, query: &[(&str, &str)]) -> String {
    let encoded: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(query)
        .finish();
    gw.admin(&format!("{path}?{encoded}"))
}

async fn admin(
    gw: &support::gateway::Gateway,
    method: Method,
    path: &str,
    query: &[(&str, &str)],
) -> Reply {
    let (k, v) = auth();
    HttpClient::default()
        .send(method, &admin_url(gw, path, query), &[(k, &v)], "")
        .await
}

async fn usage(gw: &support::gateway::Gateway, query: &[(&str, &str)]) -> Value {
    let r = admin(gw, Method::GET, "/admin/usage", query).await;
    assert_eq!(r.status, 200, "{query:?}: {}", r.body);
    r.json()
}

async fn reset(gw: &support::gateway::Gateway, query: &[(&str, &str)]) -> Value {
    let r = admin(gw, Method::DELETE, "/admin/usage", query).await;
    assert_eq!(r.status, 200, "{query:?}: {}", r.body);
    r.json()
}

/// `(name, used)` of each limit an answer shows.
fn used(answer: &Value) -> Vec<(String, u64)> {
    answer["limits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["name"].as_str().unwrap().to_string(),
                l["used"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// A phone number spelled as a customer says it finds the hashed per-phone key and the
/// per-operator prefix the sends were counted under (not the per-IP limit: a phone number is no
/// IP); a DELETE by value with `limit` lifts that limit alone, and the number can be sent to
/// again. A DELETE without `limit` by the key `GET` showed resets the limit that counts it and
/// names it; one that finds nothing says `"reset": false`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phone_number_as_the_customer_says_it_finds_and_lifts_its_hashed_key() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = gateway_on(&redis, &upstream, &routes()).await;
    let client = HttpClient::default();
    let url = gw.url("/api/otp/send");
    let send = |ip: &'static str| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let body = r#"{"phone":"+62 812-3456-7890"}"#;
            post(&client, &url, &[("x-forwarded-for", ip)], body)
                .await
                .status
        }
    };
    for ip in ["198.51.100.1", "198.51.100.2", "198.51.100.3"] {
        assert_eq!(send(ip).await, 200);
    }
    assert_eq!(send("198.51.100.4").await, 429, "the number's 4th code");

    let spoken = [("route", "otp-send"), ("value", "0812 3456 7890")];
    let found = usage(&gw, &spoken).await;
    assert_eq!(
        used(&found),
        [
            ("per-phone".to_string(), 3),
            ("per-operator".to_string(), 3)
        ],
        "{found}"
    );
    let hashed = found["limits"][0]["key"].as_str().unwrap().to_string();
    assert_eq!(hashed.len(), 32, "the per-phone key is an HMAC: {found}");
    assert!(!hashed.contains("81234567890"), "{found}");
    assert_eq!(found["key"], hashed.as_str());
    assert_eq!(found["limits"][1]["key"], "+62812");

    let lifted = reset(
        &gw,
        &[
            ("route", "otp-send"),
            ("limit", "per-phone"),
            ("value", "0812-3456-7890"),
        ],
    )
    .await;
    assert_eq!(
        lifted,
        json!({"route": "otp-send", "key": hashed, "reset": true, "limits": ["per-phone"]})
    );
    let after = usage(
        &gw,
        &[
            ("route", "otp-send"),
            ("limit", "per-phone"),
            ("key", &hashed),
        ],
    )
    .await;
    assert_eq!(used(&after), [("per-phone".to_string(), 0)], "{after}");
    assert_eq!(
        send("198.51.100.5").await,
        200,
        "the number may be sent to again"
    );

    // without `limit`, the key pasted from the answer resets the limit that counts it, by name
    let pasted = reset(&gw, &[("route", "otp-send"), ("key", &hashed)]).await;
    assert_eq!(pasted["reset"], true, "{pasted}");
    assert_eq!(pasted["limits"], json!(["per-phone"]), "{pasted}");
    let nothing = reset(&gw, &[("route", "otp-send"), ("key", &hashed)]).await;
    assert_eq!(nothing["reset"], false, "{nothing}");
    assert_eq!(nothing["limits"], json!([]), "{nothing}");
    let per_operator = usage(
        &gw,
        &[
            ("route", "otp-send"),
            ("limit", "per-operator"),
            ("key", "+62812"),
        ],
    )
    .await;
    assert_eq!(
        used(&per_operator),
        [("per-operator".to_string(), 4)],
        "untouched: {per_operator}"
    );
}

/// `DELETE` without `limit` on a route whose limits count keys of their own: by value it resets
/// the key in every limit whose key the value makes and names each; the counts are gone from
/// every one of them, and the other limits (the per-IP one) keep theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_without_limit_resets_every_limit_that_held_the_key() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = gateway_on(&redis, &upstream, &routes()).await;
    let client = HttpClient::default();
    let url = gw.url("/api/otp/send");
    for _ in 0..3 {
        let body = r#"{"phone":"081234567890"}"#;
        let r = post(&client, &url, &[("x-forwarded-for", "198.51.100.9")], body).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let lifted = reset(
        &gw,
        &[("route", "otp-send"), ("value", "+62 812 3456 7890")],
    )
    .await;
    assert_eq!(lifted["reset"], true, "{lifted}");
    assert_eq!(
        lifted["limits"],
        json!(["per-phone", "per-operator"]),
        "{lifted}"
    );
    let phone = usage(
        &gw,
        &[
            ("route", "otp-send"),
            ("value", "+6281234567890"),
            ("limit", "per-phone"),
        ],
    )
    .await;
    let operator = usage(
        &gw,
        &[
            ("route", "otp-send"),
            ("value", "+6281234567890"),
            ("limit", "per-operator"),
        ],
    )
    .await;
    assert_eq!(used(&phone), [("per-phone".to_string(), 0)], "{phone}");
    assert_eq!(
        used(&operator),
        [("per-operator".to_string(), 0)],
        "{operator}"
    );
    let ip = usage(&gw, &[("route", "otp-send"), ("key", "198.51.100.9")]).await;
    assert_eq!(
        used(&ip),
        [("per-ip".to_string(), 3)],
        "the IP's count stays: {ip}"
    );
    let again = reset(&gw, &[("route", "otp-send"), ("value", "+6281234567890")]).await;
    assert_eq!(
        (&again["reset"], &again["limits"]),
        (&json!(false), &json!([])),
        "{again}"
    );
}

/// A username typed in any case finds the lower-cased key it was counted under (unhashed), and
/// an e-mail address in capitals finds its hashed key; a DELETE by value lifts each, and the
/// client gets through again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_username_and_an_email_in_any_case_find_their_keys() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = gateway_on(&redis, &upstream, &routes()).await;
    let client = HttpClient::default();
    let login = gw.url("/api/login");
    let carol = r#"{"username":"Carol","password":"right"}"#;
    for _ in 0..5 {
        assert_eq!(post(&client, &login, &[], carol).await.status, 200);
    }
    assert_eq!(post(&client, &login, &[], carol).await.status, 429);
    let found = usage(&gw, &[("route", "login"), ("value", "CAROL")]).await;
    assert_eq!(found["key"], "carol", "{found}");
    assert_eq!(used(&found), [("per-user".to_string(), 5)], "{found}");
    let lifted = reset(&gw, &[("route", "login"), ("value", "cArOl")]).await;
    assert_eq!(
        lifted,
        json!({"route": "login", "key": "carol", "reset": true, "limits": ["per-user"]})
    );
    assert_eq!(
        post(&client, &login, &[], carol).await.status,
        200,
        "Carol is let in"
    );
    let after = usage(&gw, &[("route", "login"), ("key", "carol")]).await;
    assert_eq!(used(&after), [("per-user".to_string(), 1)], "{after}");

    let subscribe = gw.url("/api/subscribe");
    let alice = r#"{"email":"Alice@Example.com"}"#;
    for status in [200, 200, 429] {
        assert_eq!(post(&client, &subscribe, &[], alice).await.status, status);
    }
    let found = usage(
        &gw,
        &[("route", "subscribe"), ("value", "ALICE@EXAMPLE.COM")],
    )
    .await;
    let hashed = found["key"].as_str().unwrap().to_string();
    assert_eq!(hashed.len(), 32, "an HMAC: {found}");
    assert_eq!(used(&found), [("per-email".to_string(), 2)], "{found}");
    let lifted = reset(
        &gw,
        &[("route", "subscribe"), ("value", "alice@example.com")],
    )
    .await;
    assert_eq!(lifted["limits"], json!(["per-email"]), "{lifted}");
    assert_eq!(
        post(&client, &subscribe, &[], alice).await.status,
        200,
        "Alice may subscribe again"
    );
    let gone = usage(&gw, &[("route", "subscribe"), ("key", &hashed)]).await;
    assert_eq!(used(&gone), [("per-email".to_string(), 1)], "{gone}");
}

/// A value that makes no key is a 400 problem body naming the part it could not fill; `key` and
/// `value` together are a 400; so is asking with neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_that_make_no_key_are_refused_naming_the_part() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = gateway_on(&redis, &upstream, &routes()).await;
    for method in [Method::GET, Method::DELETE] {
        let bad = admin(
            &gw,
            method.clone(),
            "/admin/usage",
            &[
                ("route", "otp-send"),
                ("limit", "per-phone"),
                ("value", "hello"),
            ],
        )
        .await;
        assert_eq!(bad.status, 400, "{}", bad.body);
        let body = bad.json();
        assert_eq!(body["error"], "invalid_value", "{body}");
        assert_eq!(body["part"], "json:phone", "{body}");
        assert!(
            body["detail"].as_str().unwrap().contains("`hello`"),
            "{body}"
        );
        let both = admin(
            &gw,
            method.clone(),
            "/admin/usage",
            &[("route", "login"), ("key", "carol"), ("value", "Carol")],
        )
        .await;
        assert_eq!(both.status, 400, "{}", both.body);
        assert_eq!(both.json()["error"], "bad_request");
        let neither = admin(&gw, method, "/admin/usage", &[("route", "login")]).await;
        assert_eq!(neither.status, 400, "{}", neither.body);
    }
    let two = admin(
        &gw,
        Method::GET,
        "/admin/usage",
        &[("route", "login"), ("value", "a"), ("value", "b")],
    )
    .await;
    assert_eq!(two.status, 400, "{}", two.body);
    assert_eq!(two.json()["error"], "invalid_value");
    let blocked = admin(
        &gw,
        Method::GET,
        "/admin/blocked",
        &[("route", "otp-send"), ("value", "hello")],
    )
    .await;
    assert_eq!(blocked.status, 400, "{}", blocked.body);
}

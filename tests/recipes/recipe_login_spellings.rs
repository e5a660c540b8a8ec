//! The recipe `examples/login.toml`, run as written (`support/recipes.rs`), against the attacks
//! on its key: one account's username spelled as many JSON values that a parser reads as one
//! (a plain integer and its string, escapes, padding), numbers parsers read apart (a fraction,
//! an exponent, beyond 2^53: the attacker's own `9007199254740995` is the victim's
//! `"9007199254740996"` to a double), a folded copy of the member or the username in the query
//! beside a throwaway one, and the login sent in a form the gateway cannot read. Each gets the
//! one key of the value or a 400, and never reaches the upstream uncounted.

use crate::support;

use support::http::HttpClient;
use support::recipes::{ip, post_as, requests, AuthUpstream, Recipe};
use support::redis::RedisServer;

fn login(user: &str, password: &str) -> String {
    serde_json::json!({ "username": user, "password": password }).to_string()
}

fn login_json(user: &str, password: &str) -> String {
    format!(r#"{{"username":{user},"password":"{password}"}}"#)
}

/// A stuffing run on one account spelled many ways a JSON parser reads as one value: the number
/// 12345 and the string with escapes or padding; and written as numbers parsers read apart (a
/// fraction, an exponent), each a 400 `ambiguous_key`. Exactly 5 password checks reach the
/// upstream; the rest are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_spellings_of_one_username_get_five_checks() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = Recipe::start("login.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let url = gw.url("/api/login");
    for (n, unclear) in ["12345.0", "1.2345e4", "123450e-1", "1.2345E+4", "-0"]
        .iter()
        .enumerate()
    {
        let r = post_as(
            &client,
            &url,
            &ip(50 + n as u32),
            &login_json(unclear, "guess"),
        )
        .await;
        assert_eq!(r.status, 400, "{unclear}: {}", r.body);
        assert_eq!(r.json()["error"], "ambiguous_key", "{unclear}");
    }
    assert!(upstream.bodies("/api/login").is_empty());
    let spellings = [
        "12345",
        r#""12345""#,
        r#""\u0031\u0032345""#,
        r#"" 12345 ""#,
        r#""12345\t""#,
        r#""\u0031\u0032\u0033\u0034\u0035""#,
        "12345",
        r#""12345 ""#,
        r#""\n12345""#,
        r#""1234\u0035""#,
    ];
    let mut statuses = Vec::new();
    for round in 0..2u32 {
        for (i, user) in spellings.iter().enumerate() {
            let n = round * 10 + i as u32;
            let r = post_as(&client, &url, &ip(n), &login_json(user, "guess")).await;
            statuses.push(r.status.as_u16());
        }
    }
    let mut expected = vec![401u16; 5];
    expected.resize(20, 429);
    assert_eq!(statuses, expected);
    assert_eq!(upstream.bodies("/api/login").len(), 5, "exactly 5 checks");
    let usage = gw.admin_get("/admin/usage?route=login&key=12345").await;
    assert_eq!(usage["limits"][0]["used"], 5, "{usage}");
    gw.stop().await;
}

/// With the account blocked, the attempts a framework could still act on are refused and never
/// reach the upstream: a folded copy of `username` beside a throwaway one (Go's
/// `encoding/json` matches names ignoring case), the username in the query too, and the same
/// JSON sent so that the gateway cannot read it (`text/plain`, no `Content-Type`, UTF-16), which
/// an upstream that ignores `Content-Type` may still read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_copies_and_unreadable_bodies_never_reach_the_upstream() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = Recipe::start("login.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let url = gw.url("/api/login");
    for n in 0..6 {
        post_as(&client, &url, &ip(n), &login("victim", "guess")).await;
    }
    assert_eq!(
        upstream.bodies("/api/login").len(),
        5,
        "the account is blocked"
    );
    let copies = [
        r#"{"username":"throwaway1","USERNAME":"victim","password":"right"}"#,
        r#"{"userName":"victim","password":"right"}"#,
        r#"{"username ":"victim","username":"throwaway2","password":"right"}"#,
        r#"{"username\u0000":"victim","password":"right"}"#,
        r#"{"username[]":"victim","password":"right"}"#,
    ];
    for (n, body) in copies.iter().enumerate() {
        let r = post_as(&client, &url, &ip(100 + n as u32), body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        assert_eq!(r.json()["error"], "ambiguous_key", "{body}");
    }
    let r = post_as(
        &client,
        &gw.url("/api/login?username=victim"),
        &ip(110),
        &login("throwaway3", "right"),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"], "ambiguous_key");

    let json = login("victim", "right");
    let utf16: Vec<u8> = json.encode_utf16().flat_map(u16::to_le_bytes).collect();
    // (content-type, body): the same login, in forms the gateway cannot read
    let unreadable: [(Option<&str>, Vec<u8>); 4] = [
        (Some("text/plain"), json.clone().into_bytes()),
        (None, json.clone().into_bytes()),
        (Some("application/json"), utf16.clone()),
        (
            Some("application/json; charset=utf-16"),
            [&[0xFF, 0xFE][..], &utf16].concat(),
        ),
    ];
    for (n, (content_type, body)) in unreadable.into_iter().enumerate() {
        let forwarded = ip(120 + n as u32);
        let mut headers = vec![("x-forwarded-for", forwarded.as_str())];
        headers.extend(content_type.map(|t| ("content-type", t)));
        let r = client
            .send_bytes(http::Method::POST, &url, &headers, body)
            .await;
        assert_eq!(r.status, 400, "{content_type:?}: {}", r.body);
        assert_eq!(r.json()["error"], "missing_key", "{content_type:?}");
    }
    assert_eq!(
        upstream.bodies("/api/login").len(),
        5,
        "nothing reached the upstream while the account was blocked"
    );
    let m = gw.metrics().await;
    assert_eq!(requests(&m, "login", "bad_request"), 10.0);
    gw.stop().await;
}

/// The attacker's own account `9007199254740995`, sent as a JSON number, is the victim's
/// `"9007199254740996"` to any parser that reads numbers as doubles (JavaScript, and the
/// gateway's reading before): between every four guesses at the victim's password, the
/// attacker's successful login reset the victim's failures. Such a number is a 400 now, so the
/// victim's account takes exactly 5 guesses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_a_number_beyond_2_53_forgives_nobody() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = Recipe::start("login.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let url = gw.url("/api/login");
    let mut n = 0;
    for _round in 0..6 {
        for _ in 0..4 {
            n += 1;
            post_as(&client, &url, &ip(n), &login("9007199254740996", "guess")).await;
        }
        n += 1;
        let own = post_as(
            &client,
            &url,
            &ip(n),
            &login_json("9007199254740995", "right"),
        )
        .await;
        assert_eq!(own.status, 400, "{}", own.body);
        assert_eq!(own.json()["error"], "ambiguous_key");
    }
    let guesses = upstream
        .bodies("/api/login")
        .iter()
        .filter(|b| String::from_utf8_lossy(b).contains("guess"))
        .count();
    assert_eq!(
        guesses, 5,
        "the victim's password was guessed {guesses} times"
    );
    gw.stop().await;
}

/// One username in the spellings a sign-in form reads as it (Django's NFKC: a long `ſ`, full-width
/// letters; case, the dotless `ı` and dotted `İ` included; what `strip()` and `trim()` take from
/// the ends: control characters, a BOM; what shows nothing anywhere, which collations ignore): one
/// key, so exactly 5 password checks reach the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_compatibility_spellings_of_one_username_get_five_checks() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = Recipe::start("login.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let url = gw.url("/api/login");
    let spellings = [
        "sam",
        "ſam",
        "ｓａｍ",
        "sam\u{1f}",
        "\u{feff}sam",
        "sａm",
        "ſａm",
        "Ｓam",
        "SAM",
        "\u{1c}ſAM\u{0}",
    ];
    let mut statuses = Vec::new();
    for (i, user) in spellings.iter().enumerate() {
        let r = post_as(&client, &url, &ip(i as u32), &login(user, "guess")).await;
        statuses.push(r.status.as_u16());
    }
    let mut expected = vec![401u16; 5];
    expected.resize(spellings.len(), 429);
    assert_eq!(statuses, expected);
    assert_eq!(upstream.bodies("/api/login").len(), 5, "exactly 5 checks");
    // the dotless and the dotted i: one letter to Java's equalsIgnoreCase and toUpperCase()
    let spellings = ["tim", "tım", "tİm", "TİM", "Tım", "TIM"];
    let mut statuses = Vec::new();
    for (i, user) in spellings.iter().enumerate() {
        let r = post_as(&client, &url, &ip(100 + i as u32), &login(user, "guess")).await;
        statuses.push(r.status.as_u16());
    }
    assert_eq!(statuses, [401, 401, 401, 401, 401, 429]);
    assert_eq!(upstream.bodies("/api/login").len(), 10, "5 checks more");
    // what shows nothing, inside the name: a collation (ICU's, MySQL's, MongoDB's) ignores it
    let spellings = [
        "ann",
        "a\u{200B}nn",
        "an\u{034F}n",
        "ann\u{FE0F}",
        "a\u{200E}nn",
        "a\u{1F}nn",
    ];
    let mut statuses = Vec::new();
    for (i, user) in spellings.iter().enumerate() {
        let r = post_as(&client, &url, &ip(200 + i as u32), &login(user, "guess")).await;
        statuses.push(r.status.as_u16());
    }
    assert_eq!(statuses, [401, 401, 401, 401, 401, 429]);
    assert_eq!(upstream.bodies("/api/login").len(), 15, "5 checks more");
    gw.stop().await;
}

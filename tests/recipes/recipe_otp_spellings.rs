//! The recipe `examples/otp.toml`, run as written (`support/recipes.rs`), against the attacks
//! on its key: one number in spellings libphonenumber reads as one number, to the path with and
//! without `;` parameters; the names a framework folds into `phone` or reads from the query
//! beside a throwaway number; a letter in the number, another region's dialling-out prefix, and
//! JSON numbers parsers read differently. Exactly 3 codes go out; every copy is a 400 that never
//! reaches the upstream.

use crate::support;

use support::http::HttpClient;
use support::recipes::{ip, post_as, requests, AuthUpstream, Recipe};
use support::redis::RedisServer;

/// A pumping run: one number in ten spellings libphonenumber reads as one number (a plain JSON
/// integer, escapes, national and international writings, Indonesia's own dialling-out prefixes,
/// libphonenumber's format less a space), from a new IP each time, half of them to the path
/// with a `;jsessionid` a servlet container routes as the same: exactly 3 codes reach the
/// upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otp_ten_spellings_of_one_number_give_three_sends() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = Recipe::start("otp.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let spellings = [
        "6281234567890",
        r#""+62812-3456-7890""#,
        r#""(0812) 3456.7890""#,
        r#""0812/3456/7890""#,
        r#""009 62 812 3456 7890""#,
        r#""+62 812-3456-7890""#,
        r#""\u002b6281234567890""#,
        r#""0812 3456 7890""#,
        r#""008 62 812 3456 7890""#,
        r#""+62 (812) 3456 7890""#,
    ];
    let mut statuses = Vec::new();
    for round in 0..3u32 {
        for (i, spelling) in spellings.iter().enumerate() {
            let n = round * 10 + i as u32;
            let path = match n % 2 {
                0 => "/api/otp/send".to_string(),
                _ => format!("/api/otp/send;jsessionid={n}"),
            };
            let body = format!(r#"{{"phone":{spelling}}}"#);
            let r = post_as(&client, &gw.url(&path), &ip(n), &body).await;
            statuses.push(r.status.as_u16());
        }
    }
    let mut expected = vec![200u16; 3];
    expected.resize(30, 429);
    assert_eq!(statuses, expected);
    let sends = upstream.bodies("/api/otp/send").len()
        + (0..30)
            .map(|n| {
                upstream
                    .bodies(&format!("/api/otp/send;jsessionid={n}"))
                    .len()
            })
            .sum::<usize>();
    assert_eq!(sends, 3, "exactly 3 codes sent");
    let m = gw.metrics().await;
    assert_eq!(requests(&m, "otp-send", "allowed"), 3.0);
    assert_eq!(requests(&m, "otp-send", "rejected"), 27.0);
    gw.stop().await;
}

/// A name the upstream's framework may fold into `phone` (`PHONE` for Go's `encoding/json`,
/// `"phone "`, `phone\u0000`, a BOM, `phone%00x` and `phone]` for PHP and Rack 2), beside the real member or alone, and the number given in
/// the query too (servlet containers read the query first): each is 400 `ambiguous_key`, counted
/// as `bad_request`, and never reaches the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otp_folded_names_and_query_copies_never_reach_the_upstream() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = Recipe::start("otp.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let throwaway = r#""0812-0000-0001""#;
    let victim = r#""0812-3456-7890""#;
    let mut cases: Vec<(String, String)> = [
        format!(r#"{{"phone":{throwaway},"PHONE":{victim}}}"#),
        format!(r#"{{"PHONE":{victim},"phone":{throwaway}}}"#),
        format!(r#"{{"Phone":{victim}}}"#),
        format!(r#"{{"phone ":{victim},"phone":{throwaway}}}"#),
        format!(r#"{{"phone\u0000":{victim},"phone":{throwaway}}}"#),
        format!(r#"{{"\ufeffphone":{victim},"phone":{throwaway}}}"#),
        format!(r#"{{"phone[]":{victim}}}"#),
        format!(r#"{{"phone":{throwaway},"\u0070hone":{victim}}}"#),
    ]
    .into_iter()
    .map(|body| ("/api/otp/send".to_string(), body))
    .collect();
    for query in [
        "phone=081234567890",
        "PHONE=081234567890",
        "phone%5B%5D=081234567890",
        "%70hone=081234567890",
        "x=1&Phone+=081234567890",
        // PHP cuts a name at its NUL; Rack 2 drops the brackets around one
        "phone%00x=081234567890",
        "phone%5D=081234567890",
        "%5Bphone=081234567890",
    ] {
        cases.push((
            format!("/api/otp/send?{query}"),
            format!(r#"{{"phone":{throwaway}}}"#),
        ));
    }
    for (n, (path, body)) in cases.iter().enumerate() {
        let r = post_as(&client, &gw.url(path), &ip(n as u32), body).await;
        assert_eq!(r.status, 400, "{path} {body}: {}", r.body);
        assert_eq!(r.json()["error"], "ambiguous_key", "{path} {body}");
    }
    assert!(upstream.bodies("/api/otp/send").is_empty());
    let m = gw.metrics().await;
    assert_eq!(requests(&m, "otp-send", "bad_request"), cases.len() as f64);
    assert_eq!(requests(&m, "otp-send", "allowed"), 0.0);
    gw.stop().await;
}

/// Spellings the gateway read otherwise than libphonenumber (Python's `phonenumbers`) does, and
/// numbers parsers disagree on: one letter in the number (libphonenumber drops it and reads the
/// victim's number), JSON numbers with a fraction, an exponent or beyond 2^53, and
/// `008 1 202 555 0143` (Indonesia's own dialling-out prefix before a US number: the victim's
/// `+1 202 555 0143`, never a Japanese `+81...`). The victim gets 3 codes, whatever the spelling;
/// every letter and every unclear number is a 400 that never reaches the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otp_letters_unclear_numbers_and_foreign_prefixes_never_add_a_code() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = Recipe::start("otp.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let mut n = 0u32;
    let mut send = |body: String| {
        n += 1;
        let (client, url, from) = (&client, gw.url("/api/otp/send"), ip(n));
        async move { post_as(client, &url, &from, &body).await }
    };
    // a letter anywhere in the victim's number, and numbers no two parsers read alike
    let refused = [
        r#""0812 3456 7890a""#,
        r#""0812a 3456 7890""#,
        r#""O812 3456 7890""#,
        r#""+62 812 3456 7890 x1""#,
        r#""tel:+6281234567890""#,
        "6281234567890.0",
        "628123456789e1",
        "628123456777.0",
        "9007199254740993",
        "1e21",
    ];
    for round in 0..2 {
        for spelling in refused {
            let r = send(format!(r#"{{"phone":{spelling}}}"#)).await;
            assert_eq!(r.status, 400, "{spelling} (round {round}): {}", r.body);
            let code = r.json()["error"].as_str().unwrap_or_default().to_string();
            assert!(
                code == "missing_key" || code == "ambiguous_key",
                "{spelling}: {code}"
            );
        }
    }
    assert!(
        upstream.bodies("/api/otp/send").is_empty(),
        "a refused spelling reached the upstream"
    );
    // the US victim, written with Indonesia's dialling-out prefix and in E.164: one number
    let mut statuses = Vec::new();
    for spelling in ["+1 202 555 0143", "008 1 202 555 0143", "0081 202-555-0143"] {
        for _ in 0..3 {
            statuses.push(
                send(format!(r#"{{"phone":"{spelling}"}}"#))
                    .await
                    .status
                    .as_u16(),
            );
        }
    }
    let mut expected = vec![200u16; 3];
    expected.resize(9, 429);
    assert_eq!(statuses, expected);
    assert_eq!(
        upstream.bodies("/api/otp/send").len(),
        3,
        "exactly 3 codes sent"
    );
    let m = gw.metrics().await;
    assert_eq!(
        requests(&m, "otp-send", "bad_request"),
        2.0 * refused.len() as f64
    );
    assert_eq!(requests(&m, "otp-send", "allowed"), 3.0);
    gw.stop().await;
}

/// A body that parses both as JSON and as a form (`{"phone":<decoy>,"a":"&phone=<victim>&"}`),
/// sent with a `Content-Type` frameworks read as different types: PHP and Rack cut
/// `application/x-www-form-urlencoded,x/y+json` at the comma (or the space) and read the form's
/// `phone`, the victim's, where the subtype's end says JSON; Laravel reads any type mentioning
/// `/json` as JSON. Each is 400 `ambiguous_key` and never reaches the upstream, so no decoy
/// number buys the victim a code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otp_polyglot_bodies_with_types_read_two_ways_never_reach_the_upstream() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = Recipe::start("otp.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let types = [
        "application/x-www-form-urlencoded,x/y+json",
        "application/x-www-form-urlencoded x/y+json",
        "application/x-www-form-urlencoded, application/json",
        "text/plain; x=/json",
    ];
    for (n, content_type) in types.iter().enumerate() {
        let body = format!(r#"{{"phone":"0812-0000-000{n}","a":"&phone=081234567890&b="}}"#);
        let r = client
            .send(
                http::Method::POST,
                &gw.url("/api/otp/send"),
                &[
                    ("content-type", content_type),
                    ("x-forwarded-for", &ip(n as u32)),
                ],
                &body,
            )
            .await;
        assert_eq!(r.status, 400, "{content_type}: {}", r.body);
        assert_eq!(r.json()["error"], "ambiguous_key", "{content_type}");
    }
    assert!(upstream.bodies("/api/otp/send").is_empty());
    gw.stop().await;
}

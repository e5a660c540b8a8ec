//! The recipe `examples/otp.toml`, run as written (`support/recipes.rs`), against the attacks
//! on its key: one number in spellings a JSON parser reads as one value, to the path with and
//! without `;` parameters, and the names a framework folds into `phone` or reads from the query
//! beside a throwaway number. Exactly 3 codes go out; every copy is a 400 that never reaches the
//! upstream.

mod support;

use support::http::HttpClient;
use support::recipes::{ip, post_as, requests, AuthUpstream, Recipe};
use support::redis::RedisServer;

/// A pumping run: one number in ten spellings a JSON parser reads as one value (JSON
/// numbers with a fraction or an exponent, escapes, national and international writings), from a
/// new IP each time, half of them to the path with a `;jsessionid` a servlet container routes as
/// the same: exactly 3 codes reach the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otp_ten_spellings_of_one_number_give_three_sends() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = Recipe::start("otp.toml", &redis, &upstream).await;
    let client = HttpClient::default();
    let spellings = [
        "6281234567890",
        "6281234567890.0",
        "628123456789e1",
        "6.28123456789E12",
        "62812345678900e-1",
        "0.628123456789e+13",
        r#""+62 812-3456-7890""#,
        r#""\u002b6281234567890""#,
        r#""0812 3456 7890""#,
        r#""006281234567890""#,
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
/// `"phone "`, `phone\u0000`, a BOM), beside the real member or alone, and the number given in
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

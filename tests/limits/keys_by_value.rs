//! A key is the value the upstream acts on, over real sockets with a real Redis and a real
//! upstream: every bare spelling of one mailbox is one key and other e-mail forms are refused
//! before the upstream; a body the gateway reads for a key has its `Expect: 100-continue`
//! answered by the gateway and not forwarded. (`;` path parameters: `path_normalisation.rs`.)

use crate::support;

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use support::http::HttpClient;
use support::otp_login::{gateway_on, post, requests, scrape, AuthUpstream, OTP_ROUTE};
use support::raw;
use support::redis::RedisServer;

const SIGNUP_ROUTE: &str = r#"
[[routes]]
name = "signup"
path = "/api/signup"
methods = ["POST"]
upstream = "up"
key = [{ part = "json:email", normalize = "email" }]

  [[routes.limits]]
  name = "per-mailbox"
  limit = 3
  window = "10m"
"#;

fn signup(email: &str) -> String {
    serde_json::json!({ "email": email }).to_string()
}

/// Bare spellings of one mailbox (case, `+tag`, needless quotes, a trailing dot, an
/// internationalised domain in either form) share one quota of 3; every other RFC 5322 form is
/// 400 `missing_key` with a detail that says the value is not an address, counted as
/// `bad_request`, and never reaches the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bare_spelling_of_a_mailbox_is_one_key_and_other_forms_are_refused() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = gateway_on(&redis, &upstream, SIGNUP_ROUTE).await;
    let client = HttpClient::default();
    let url = gw.url("/api/signup");
    for (mailbox, spellings) in [
        (
            "alice@example.com",
            [
                "alice@example.com",
                "Alice@Example.COM",
                "alice+promo@example.com",
                "\"alice\"@example.com",
                "alice@example.com.",
                " ALICE+x@EXAMPLE.com. ",
            ],
        ),
        (
            "jörg@bücher.de",
            [
                "jörg@bücher.de",
                "JÖRG@BÜCHER.DE",
                "jörg@xn--bcher-kva.de",
                "jörg+1@xn--BCHER-KVA.de.",
                "\"jörg\"@bücher.de",
                "jörg@bücher\u{FF0E}de",
            ],
        ),
    ] {
        let mut statuses = Vec::new();
        for spelling in spellings {
            let r = post(&client, &url, &[], &signup(spelling)).await;
            statuses.push(r.status.as_u16());
        }
        assert_eq!(statuses, [200, 200, 200, 429, 429, 429], "{mailbox}");
    }
    assert_eq!(upstream.bodies("/api/signup").len(), 6);

    let refused = [
        "Alice <alice@example.com>",
        "<alice@example.com>",
        "alice@example.com (work)",
        "(work)alice@example.com",
        "mailto:alice@example.com",
        "\"al ice\"@example.com",
        "\"al\\ice\"@example.com",
        "al ice@example.com",
        "alice\u{0}@example.com",
        "alice@@example.com",
        "alice@example.com, bob@example.com",
        "alice@[192.0.2.1]",
        "alice",
    ];
    for form in refused {
        let r = post(&client, &url, &[], &signup(form)).await;
        assert_eq!(r.status, 400, "{form:?}: {}", r.body);
        let problem = r.json();
        assert_eq!(problem["error"], "missing_key", "{form:?}");
        assert_eq!(
            problem["detail"],
            "json:email is not a valid e-mail address (needed for the rate-limit key)",
            "{form:?}"
        );
    }
    assert_eq!(
        upstream.bodies("/api/signup").len(),
        6,
        "nothing refused went upstream"
    );
    let m = scrape(&gw).await;
    assert_eq!(requests(&m, "signup", "bad_request"), refused.len() as f64);
    assert_eq!(requests(&m, "signup", "allowed"), 6.0);
    gw.stop().await;
}

/// A client that asks `Expect: 100-continue` on a route that reads its body for a key gets the
/// `100 Continue` from the gateway, sends its body, and gets the upstream's answer; the
/// upstream gets the whole body and no `Expect` (it would answer a question already answered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_continue_is_answered_by_the_gateway_and_not_forwarded() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = gateway_on(&redis, &upstream, OTP_ROUTE).await;
    let addr: SocketAddr = gw.url("").trim_start_matches("http://").parse().unwrap();
    let body = r#"{"phone":"0812-3456-7890"}"#;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /api/otp/send HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let interim = raw::read_head(&mut stream).await;
    assert!(
        interim.starts_with("HTTP/1.1 100 Continue\r\n"),
        "no 100 Continue before the body: {interim:?}"
    );
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut rest),
    )
    .await
    .expect("an answer within 10 s")
    .unwrap();
    let reply = raw::parse(&rest);
    assert_eq!(reply.status, 200, "{}{}", reply.head, reply.body);
    assert_eq!(
        upstream.bodies("/api/otp/send"),
        vec![body.as_bytes().to_vec()]
    );
    let heads = upstream.heads("/api/otp/send");
    assert!(
        heads[0].get("expect").is_none(),
        "Expect forwarded upstream: {:?}",
        heads[0]
    );
    gw.stop().await;
}

const FORM_OTP_ROUTE: &str = r#"
[[routes]]
name = "otp-form"
path = "/api/otp/form"
methods = ["POST"]
upstream = "up"
key = ["form:phone"]
on_missing_key = "ip"

  [[routes.limits]]
  name = "per-phone"
  limit = 3
  window = "10m"
"#;

/// A `phone` cookie beside a form's `phone` field: PHP's `$_REQUEST` (with no `php.ini` setting
/// `request_order`, as in the official Docker image) lets the cookie win, so a bot sends the
/// victim's number in the cookie and a throwaway one in the form. A cookie PHP reads as `phone`
/// that says another number than the field (as PHP reads it: a `+` stays), or stands where the
/// field is missing, is 400 `ambiguous_key` and never reaches the upstream; one that says the
/// same number, or that PHP does not read as `phone`, is no copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cookie_named_like_a_form_field_that_says_otherwise_is_ambiguous() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = gateway_on(&redis, &upstream, FORM_OTP_ROUTE).await;
    let client = HttpClient::default();
    let url = gw.url("/api/otp/form");
    let form = "application/x-www-form-urlencoded";
    let send = |cookie: &'static str, body: &'static str| {
        let (client, url) = (&client, &url);
        async move {
            let mut headers = vec![("content-type", form)];
            if !cookie.is_empty() {
                headers.push(("cookie", cookie));
            }
            client.send(http::Method::POST, url, &headers, body).await
        }
    };
    for (cookie, body) in [
        ("phone=081234567890", "phone=081200000001"),
        ("session=x;  phone=081234567890", "phone=081200000002"),
        ("phone[]=081234567890", "phone=081200000003"),
        ("phone=081234567890", "other=1"),
        // PHP keeps a cookie's `+`, where a form reads a space
        ("phone=0812+34567890", "phone=0812+34567890"),
    ] {
        let r = send(cookie, body).await;
        assert_eq!(r.status, 400, "{cookie} {body}: {}", r.body);
        assert_eq!(r.json()["error"], "ambiguous_key", "{cookie} {body}");
    }
    assert!(upstream.bodies("/api/otp/form").is_empty());
    // cookies PHP does not read as `phone` (its names keep their case, escapes and a trailing
    // space, read as `_`, and it splits a line on `;` only), and one that says the same number
    for (n, cookie) in [
        "phone=081234567890",
        "Phone=081299999999",
        "%70hone=081299999999",
        "prefs=a,phone=081299999999",
        "phone =081299999999",
        "",
    ]
    .into_iter()
    .enumerate()
    {
        let body: &'static str = [
            "phone=081234567890",
            "phone=081200000010",
            "phone=081200000011",
            "phone=081200000012",
            "phone=081200000014",
            "phone=081200000013",
        ][n];
        let r = send(cookie, body).await;
        assert_eq!(r.status, 200, "{cookie} {body}: {}", r.body);
    }
    gw.stop().await;
}

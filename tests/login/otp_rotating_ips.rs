//! The bot of the README's "Protecting OTP and login endpoints", through the gateway over real sockets with a real Redis: a thousand
//! OTP requests for one number through rotating IPs, the number spelled every way it can be and
//! keyed from the JSON body, normalised and hashed. Exactly the per-phone limit reaches the
//! upstream, the refused requests are charged nowhere, and the number never reaches Redis raw.

use crate::support;

use support::http::HttpClient;
use support::otp_login::{gateway_on, post, requests, scrape, AuthUpstream, OTP_ROUTE};
use support::redis::{RedisServer, Resp};

/// The bot of the README's "Protecting OTP and login endpoints": a thousand OTP requests for one number through rotating IPs
/// (each a new client behind the trusted proxy), spelled in every way a number can be. Exactly
/// the per-phone limit reaches the upstream; the number never reaches Redis raw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_otp_requests_through_rotating_ips_send_three_codes() {
    let redis = RedisServer::start_async().await;
    let upstream = AuthUpstream::start().await;
    let gw = gateway_on(&redis, &upstream, OTP_ROUTE).await;
    let client = HttpClient::default();
    let spellings = [
        "0812-3456-7890",
        "+62 812 3456 7890",
        "(0812) 3456.7890",
        "008 62 812 3456 7890",
        "+6281234567890",
    ];
    let mut allowed = 0;
    for i in 0..1000u32 {
        let ip = format!("198.51.{}.{}", i / 250, i % 250 + 1);
        let body = format!(
            "{{\"phone\":\"{}\"}}",
            spellings[i as usize % spellings.len()]
        );
        let r = post(
            &client,
            &gw.url("/api/otp/send"),
            &[("x-forwarded-for", &ip)],
            &body,
        )
        .await;
        match r.status.as_u16() {
            200 => allowed += 1,
            429 => assert_eq!(r.json()["limit"], "per-phone"),
            other => panic!("unexpected {other}: {}", r.body),
        }
    }
    assert_eq!(allowed, 3);
    assert_eq!(upstream.bodies("/api/otp/send").len(), 3);
    let Resp::Array(keys) = redis.cmd(&["KEYS", "*"]) else {
        panic!("KEYS")
    };
    let keys: Vec<String> = keys
        .into_iter()
        .filter_map(|k| match k {
            Resp::Bulk(Some(k)) => Some(k),
            _ => None,
        })
        .collect();
    // (the whole national number: three digits could come from the key prefix, which holds
    // the test's process id, or from a hash's hex)
    assert!(
        keys.iter().all(|k| !k.contains("81234567890")),
        "a raw number reached Redis: {keys:?}"
    );
    // a rejected request is charged nowhere: 3 entries for the number, 3 for the three IPs
    let metrics = scrape(&gw).await;
    assert_eq!(requests(&metrics, "otp-send", "allowed"), 3.0);
    assert_eq!(requests(&metrics, "otp-send", "rejected"), 997.0);
    gw.stop().await;
}

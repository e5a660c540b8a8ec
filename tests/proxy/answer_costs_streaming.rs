//! The answer's bytes reach the client unchanged while the gateway reads the cost they state
//! (README, "Limits on what the answer says it cost"): an event stream cut into two chunks at
//! every position (inside `data:`, between CR and LF, inside the usage member's digits) arrives
//! at the client byte for byte as the upstream sent it, with the first chunk before the second
//! is sent, and each answer is charged the usage of its last event carrying it.

use crate::support;

use std::time::Duration;

use http::Method;
use http_body_util::BodyExt;
use support::gateway::{config, start};
use support::http::HttpClient;
use support::llm;
use support::metrics::value;

const ROUTES: &str = r#"
[[routes]]
name = "chat"
path = "/*"
upstream = "up"
key = ["header:x-api-key"]
  [[routes.limits]]
  name = "tokens"
  limit = 1000000
  window = "1h"
  algorithm = "sliding_window_counter"
  cost_from = "sse:usage.total_tokens"
"#;

#[tokio::test]
async fn an_event_stream_cut_anywhere_arrives_whole_and_is_charged_its_usage() {
    let up = llm::start().await;
    let gw = start(&config("backend = \"memory\"", &up.url(), ROUTES)).await;
    let mut stream: Vec<u8> = b": opening comment\r\n\r\n".to_vec();
    for event in llm::events(3, true) {
        stream.extend_from_slice(&event);
    }
    // the same events with CRLF line ends, after the LF ones
    stream.extend(
        String::from_utf8(llm::events(0, false).concat())
            .unwrap()
            .replace('\n', "\r\n")
            .bytes(),
    );
    up.set_payload(&stream);
    let client = HttpClient::default();
    for at in 0..=stream.len() {
        let key = format!("k{at}");
        let url = gw.url(&format!("/split?at={at}&ms=3"));
        let mut response = client
            .open(Method::GET, &url, &[("x-api-key", &key)], "")
            .await;
        let mut got = Vec::new();
        while let Some(frame) = response.body_mut().frame().await {
            if let Some(data) = frame.unwrap().data_ref() {
                if got.is_empty() && at > 0 && at < stream.len() {
                    assert_eq!(
                        data.as_ref(),
                        &stream[..at],
                        "the first chunk is passed on as it came"
                    );
                }
                got.extend_from_slice(data);
            }
        }
        assert_eq!(got, stream, "cut at {at}");
    }
    let answers = (stream.len() + 1) as f64;
    let metrics = client.get(&gw.admin("/metrics"), &[]).await.body;
    let settled = value(
        &metrics,
        "slidegate_cost_settled_total",
        &[("limit", "tokens")],
    );
    assert_eq!(settled, Some(answers * (llm::PROMPT_TOKENS + 3) as f64));
    tokio::time::sleep(Duration::from_millis(10)).await;
}

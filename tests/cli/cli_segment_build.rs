//! `slidegate segment build` (README, "Running"): it writes a bitmap of the ids it read that a
//! gateway then uses as a segment, and refuses an ids file with a line that is not a u32, naming
//! the line.

use crate::support;

use support::cli_commands::{path_arg, slidegate, stderr, stdout};
use support::gateway;
use support::http::HttpClient;
use support::upstream;

const SEGMENTED: &str = r#"
[segments.vip]
members_file = "vip.roaring"

[[routes]]
name = "push"
path = "/push"
upstream = "up"
key = ["header:X-User"]
  [[routes.limits]]
  name = "per-day"
  limit = 1
  window = "1d"
    [routes.limits.segments]
    vip = 3
"#;

/// `segment build` writes a bitmap of the ids it read (blank lines skipped); a gateway that
/// takes it as a segment gives its members the segment's value and everyone else the limit's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segment_build_writes_a_bitmap_a_gateway_uses() {
    let dir = tempfile::tempdir().unwrap();
    let ids = dir.path().join("vip.txt");
    std::fs::write(&ids, "7\n\n  4000000000  \n100\n7\n").unwrap();
    let out = dir.path().join("vip.roaring");
    let built = slidegate(&["segment", "build", path_arg(&ids), path_arg(&out)], &[]);
    assert!(built.status.success(), "{}", stderr(&built));
    assert!(
        stdout(&built).contains("vip.roaring: 3 ids"),
        "{}",
        stdout(&built)
    );

    let up = upstream::start().await;
    let toml = gateway::config("backend = \"memory\"", &up.url(), SEGMENTED);
    let bitmap = std::fs::read(&out).unwrap();
    let gw = gateway::start_with_files(&toml, &[("vip.roaring", bitmap)]).await;
    let client = HttpClient::default();
    let url = gw.url("/push");
    for (user, allowed, segment) in [
        ("7", 3, Some("vip")),
        ("4000000000", 3, Some("vip")),
        ("100", 3, Some("vip")),
        ("8", 1, None),
    ] {
        let mut statuses = Vec::new();
        let mut last = None;
        for _ in 0..=allowed {
            let r = client.get(&url, &[("x-user", user)]).await;
            statuses.push(r.status.as_u16());
            last = Some(r);
        }
        let mut expected = vec![200u16; allowed];
        expected.push(429);
        assert_eq!(statuses, expected, "user {user}");
        let body = last.unwrap().json();
        assert_eq!(body["segment"].as_str(), segment, "user {user}: {body}");
    }
    gw.stop().await;
}

/// An ids file with a line that is not a u32 is refused with the line's number, and no bitmap
/// is written.
#[test]
fn segment_build_refuses_an_id_that_is_not_a_u32_naming_its_line() {
    let dir = tempfile::tempdir().unwrap();
    for (contents, line, bad) in [
        ("1\n2\nabc\n", 3, "abc"),
        ("1\n\n4294967296\n", 3, "4294967296"),
        ("-1\n", 1, "-1"),
    ] {
        let ids = dir.path().join("ids.txt");
        std::fs::write(&ids, contents).unwrap();
        let out = dir.path().join("out.roaring");
        let run = slidegate(&["segment", "build", path_arg(&ids), path_arg(&out)], &[]);
        let err = stderr(&run);
        assert!(!run.status.success(), "{contents:?}");
        assert!(
            err.contains(&format!("ids.txt:{line}: `{bad}` is not a user id")),
            "{contents:?}: {err}"
        );
        assert!(!out.exists(), "no bitmap written for {contents:?}");
    }
}

//! `slidegate check` on a layer file (`RateLimitLayer::from_file`'s: routes without `upstream`,
//! no `[upstreams]`): detected or named with `--layer`, summarised as a layer, refused with
//! FILE:LINE:COLUMN like a gateway config, and a `[server]` key a layer does not take named
//! with the keys it does.

use crate::support;

use support::cli_commands::{check_text, line_column, stderr, stdout};
use support::layer::BEHIND_A_BALANCER as LAYER;

/// A layer file is told apart from a gateway config by its routes (no `upstream`, no
/// `[upstreams]`), accepted, and summarised as a layer: where client IPs come from, each route
/// passing to the service.
#[test]
fn check_detects_a_layer_file_and_summarises_it() {
    let (_dir, file, out) = check_text("limits.toml", LAYER, &[], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "", "no warnings for this file");
    let summary = stdout(&out);
    assert!(
        summary.starts_with(&format!("{file}: OK (a layer file")),
        "{summary}"
    );
    assert!(
        summary.contains("client ip: x-forwarded-for from 127.0.0.1/32"),
        "{summary}"
    );
    assert!(summary.contains("-> (the service)"), "{summary}");
    assert!(summary.contains("per-ip           1 per 1h"), "{summary}");

    // `--layer` says so for a file that does not look like one (an upstream is ignored there)
    let with_upstream = LAYER.replace(
        "methods = [\"POST\"]",
        "methods = [\"POST\"]\nupstream = \"x\"",
    );
    let (_dir, file, out) = check_text("limits.toml", &with_upstream, &["--layer"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("a layer file"), "{}", stdout(&out));
    let at = line_column(&with_upstream, "\"x\"");
    assert_eq!(
        stderr(&out),
        format!("{file}:{at}: warning: routes[0].upstream is ignored: an embedded layer passes requests to its own service\n")
    );
    // without `--layer` the same file is a gateway config, whose upstream must exist
    let (_dir, file, out) = check_text("limits.toml", &with_upstream, &[], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with(&format!(
            "{file}:{at}: routes[0].upstream: unknown upstream `x`"
        )),
        "{}",
        stderr(&out)
    );
}

/// A layer file is refused as a gateway config is, at FILE:LINE:COLUMN, and a `[server]` key a
/// layer does not take (the wrapped service has its own listener and timeouts) is named with
/// the keys it does take.
#[test]
fn check_refuses_a_bad_layer_file_where_it_is_wrong() {
    let bad = LAYER.replace("limit = 1\n", "limit = 0\n");
    let (_dir, file, out) = check_text("limits.toml", &bad, &[], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let at = line_column(&bad, "0\n");
    assert_eq!(
        stderr(&out),
        format!("{file}:{at}: routes[0].limits[0].limit: must be at least 1, got 0\n")
    );
    assert_eq!(stdout(&out), "", "no summary for a refused file");

    let listening = LAYER.replace(
        "ipv6_prefix = 56",
        "ipv6_prefix = 56\nlisten = \"0.0.0.0:8080\"",
    );
    let (_dir, file, out) = check_text("limits.toml", &listening, &[], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let at = line_column(&listening, "\"0.0.0.0:8080\"");
    assert_eq!(
        stderr(&out),
        format!("{file}:{at}: server.listen: a layer file takes only server.trusted_proxies, server.client_ip_header and server.ipv6_prefix (where clients come from); the service the layer wraps has its own server\n")
    );
    // the gateway's config takes it
    let gateway = listening
        .replace(
            "methods = [\"POST\"]",
            "methods = [\"POST\"]\nupstream = \"app\"",
        )
        .replace(
            "[store]",
            "[upstreams.app]\nurl = \"http://127.0.0.1:9\"\n\n[store]",
        );
    let (_dir, _, out) = check_text("config.toml", &gateway, &[], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stdout(&out).contains("a layer file"), "{}", stdout(&out));
}

/// A layer has no admin listener, so an `[admin]` setting in a layer file would do nothing: it
/// is refused where it stands, saying so (and that a gateway config names an upstream on every
/// route, since a gateway file whose routes all lack one reads as a layer file), rather than
/// checked as fine and ignored.
#[test]
fn check_refuses_an_admin_listener_in_a_layer_file() {
    let with_admin = format!(
        "{LAYER}
[admin]
listen = \"127.0.0.1:9091\"
"
    );
    let (_dir, file, out) = check_text("limits.toml", &with_admin, &[], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let at = line_column(&with_admin, "\"127.0.0.1:9091\"");
    assert_eq!(
        stderr(&out),
        format!("{file}:{at}: admin.listen: a layer file has no admin listener (the service the layer wraps serves its metrics with RateLimitLayer::scrape); in a gateway config, every route names its upstream\n")
    );
    assert_eq!(stdout(&out), "", "no summary for a refused file");
}

/// A file checked as a layer file (`check --layer`, as `RateLimitLayer::from_file` reads it)
/// with a section only the gateway reads, `[upstreams]` or a listener, is refused where the
/// section stands rather than read and ignored.
#[test]
fn check_refuses_the_gateways_own_sections_in_a_layer_file() {
    let sections = [
        (
            "[upstreams.billing]\nurl = \"http://127.0.0.1:9\"\n",
            "upstreams.billing",
        ),
        (
            "[forward_auth]\nlisten = \"127.0.0.1:8082\"\n",
            "forward_auth",
        ),
    ];
    for (section, name) in sections {
        let text = format!("{LAYER}\n{section}");
        let (_dir, file, out) = check_text("limits.toml", &text, &["--layer"], &[]);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", stdout(&out));
        let said = stderr(&out);
        assert!(said.starts_with(&format!("{file}:")), "{said}");
        assert!(said.contains(&format!(": {name}: a layer file")), "{said}");
    }
}

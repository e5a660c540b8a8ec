//! Bad input to the rate-limit service: a gRPC request naming no domain or no descriptor gets a
//! status naming what is wrong (never a panic, never a decision; everything else is decided:
//! tests/envoy/rls_never_unlimited.rs), and limit files that are not what envoyproxy/ratelimit's
//! format allows are refused with FILE:LINE:COLUMN, while odd ones it loads load with a warning.

use crate::support;

use support::redis::RedisServer;
use support::rls::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_request_naming_no_domain_or_no_descriptor_is_an_error() {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n";
    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-bad", yaml, "").await;
    let mut c = client(&gw).await;
    let k = || descriptor(&[("k", "v")]);
    let cases: Vec<(&str, _)> = vec![
        ("domain", request("", vec![k()])),
        ("descriptors", request("d", vec![])),
    ];
    for (says, bad) in cases {
        let status = try_ask(&mut c, bad).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(says), "{says}: {status:?}");
    }
    // Nothing of the above was charged: hits_addend 0 on the request is 1.
    let r = ask(&mut c, request("d", vec![k()])).await;
    assert_eq!(r.statuses[0].limit_remaining, 4);
}

/// Loads a gateway config whose `[rls]` reads `limits/` holding `files`; the error's text.
fn refused(files: &[(&str, &str)]) -> String {
    refused_with("", files)
}

/// [`refused`] with `extra` lines in `[rls]`.
fn refused_with(extra: &str, files: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("limits")).unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join("limits").join(name), text).unwrap();
    }
    let toml = format!("[rls]\nconfig = \"limits\"\n{extra}");
    let path = dir.path().join("config.toml");
    std::fs::write(&path, toml).unwrap();
    let e = slidegate::config::Config::load_with_env(&path, |_: &str| None)
        .expect_err("the limit files are refused");
    let text = e.to_string();
    // The file's name as written, not the temp dir's.
    text.replace(&format!("{}/", dir.path().join("limits").display()), "")
}

#[test]
fn bad_limit_files_are_refused_at_their_place() {
    let limit = "    rate_limit: { unit: minute, requests_per_unit: 1 }\n";
    let cases: Vec<(Vec<(&str, String)>, &str)> = vec![
        (
            vec![
                ("a.yaml", format!("domain: d\ndescriptors:\n  - key: k\n{limit}")),
                ("b.yaml", "domain: d\n".into()),
            ],
            "b.yaml:1:9: domain: duplicate domain `d` (also at",
        ),
        (
            vec![("a.yaml", format!("domain: d\ndescriptors:\n  - key: k\n{limit}  - key: k\n{limit}"))],
            "a.yaml:5:10: descriptor: duplicate `k` at this level",
        ),
        (
            vec![("a.yaml", "domain: d\ndomain: e\n".into())],
            "a.yaml:2:1: not valid YAML: duplicated key in mapping",
        ),
        (
            vec![("a.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n".into())],
            "a.yaml:4:25: unit: unknown unit `fortnight`",
        ),
        (
            vec![("a.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, window: 10m, requests_per_unit: 1 }\n".into())],
            "a.yaml:4:41: window: give either `unit` or `window`, not both",
        ),
        (
            vec![("a.yaml", "domain: d\ndescriptors:\n\t- key: k\n".into())],
            "a.yaml:3:2: not valid YAML: tabs disallowed",
        ),
        (
            vec![("a.yaml", "{ this is: [not yaml\n".into())],
            "a.yaml:2:1: not valid YAML:",
        ),
        (
            vec![("a.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 20000 }\n".into())],
            "a.yaml:4:52: requests_per_unit: a sliding_log limit holds at most 10000 (it stores one entry per counted unit); for more, use algorithm: sliding_window_counter or gcra",
        ),
        (
            vec![("a.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limits: {}\n".into())],
            "a.yaml:4:5: a descriptor: unknown key `rate_limits`",
        ),
    ];
    let wrong: Vec<String> = cases
        .iter()
        .filter_map(|(files, expected)| {
            let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (*n, t.as_str())).collect();
            let error = refused(&files);
            (!error.starts_with(expected))
                .then(|| format!("expected `{expected}...`, got `{error}`"))
        })
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Merged files of one domain repeating a first-level descriptor: the error names the repeat
/// where it is written in the later file.
#[test]
fn a_merged_domains_repeated_descriptor_is_refused_at_its_place() {
    let limit = "    rate_limit: { unit: minute, requests_per_unit: 1 }\n";
    let first = format!("domain: d\ndescriptors:\n  - key: k\n{limit}");
    let second = format!("domain: d\ndescriptors:\n  - key: j\n{limit}  - key: k\n{limit}");
    let error = refused_with(
        "merge_domains = true\n",
        &[("a.yaml", &first), ("b.yaml", &second)],
    );
    assert!(
        error.starts_with(
            "b.yaml:5:10: descriptor: duplicate `k` in domain `d` (also at a.yaml:3:10)"
        ),
        "{error}"
    );
}

#[test]
fn a_domain_is_named_apart_from_every_route() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("limits.yaml"), "domain: otp\n").unwrap();
    let toml = "[rls]\nconfig = \"limits.yaml\"\n\n[[routes]]\nname = \"otp\"\npath = \"/otp\"\nupstream = \"up\"\n\n[upstreams.up]\nurl = \"http://127.0.0.1:9\"\n";
    let path = dir.path().join("config.toml");
    std::fs::write(&path, toml).unwrap();
    let e = slidegate::config::Config::load_with_env(&path, |_: &str| None).unwrap_err();
    assert!(
        e.to_string()
            .contains("config.toml:2:10: rls.config: domain `otp` is also a route's name"),
        "{e}"
    );
}

/// Files envoyproxy/ratelimit loads load here too, each oddity a warning at its place: a
/// `replaces` naming no rate limit replaces nothing, and two rate limits given one name share
/// it in the metrics while each keeps its own count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_files_envoyproxy_loads_load_with_a_warning() {
    let yaml = "domain: d\ndescriptors:\n  - key: k1\n    rate_limit: { unit: minute, requests_per_unit: 1, name: same }\n  - key: k2\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1\n      name: same\n      replaces: [{ name: nobody }]\n";
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("limits")).unwrap();
    std::fs::write(dir.path().join("limits").join("a.yaml"), yaml).unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, "[rls]\nconfig = \"limits\"\n").unwrap();
    let config = slidegate::config::Config::load_with_env(&path, |_: &str| None).expect("loads");
    let shown = format!("{}/", dir.path().join("limits").display());
    let warnings: Vec<String> = (config.warnings.iter())
        .map(|w| w.to_string().replace(&shown, ""))
        .collect();
    let expected = [
        "a.yaml:10:26: warning: replaces: no rate_limit of this domain is named `nobody`: it replaces nothing",
        "a.yaml:7:7: warning: rate_limit: another rate limit of this domain is called `same` too",
    ];
    for e in expected {
        assert!(
            warnings.iter().any(|w| w.starts_with(e)),
            "{e}\n{warnings:#?}"
        );
    }

    let redis = RedisServer::start();
    let gw = serve(&redis, "rls-odd", yaml, "").await;
    let mut c = client(&gw).await;
    let first = ask(&mut c, request("d", vec![descriptor(&[("k1", "v")])])).await;
    assert_eq!(first.statuses[0].limit_remaining, 0);
    let again = ask(&mut c, request("d", vec![descriptor(&[("k1", "v")])])).await;
    assert_eq!(again.overall_code, 2, "OVER_LIMIT: {again:?}");
    let other = ask(&mut c, request("d", vec![descriptor(&[("k2", "v")])])).await;
    assert_eq!(other.overall_code, 1, "k2 counts apart: {other:?}");
}

//! The image (`Dockerfile`, which `docker compose up --build` builds) gets every input the
//! crate's build reads, and the compose stack mounts only files the repository has. No Docker
//! daemon is needed: the files are read as the build would take them.

use std::collections::BTreeSet;
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// What the build stage copies into the image, by source path.
fn copied() -> BTreeSet<String> {
    let dockerfile = std::fs::read_to_string(Path::new(ROOT).join("Dockerfile")).unwrap();
    dockerfile
        .lines()
        .filter_map(|l| l.trim().strip_prefix("COPY "))
        .filter(|args| !args.starts_with("--from"))
        .flat_map(|args| {
            let words: Vec<&str> = args.split_whitespace().collect();
            // every word but the last is a source
            let sources = &words[..words.len().saturating_sub(1)];
            sources
                .iter()
                .map(|w| w.trim_end_matches('/').to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn the_image_builds_from_every_input_of_the_crate() {
    let copied = copied();
    // what `cargo build` of this package reads: the manifest and lock file, the sources, the
    // Lua it embeds, and the build script with the protos it compiles
    let mut needed = vec!["Cargo.toml", "Cargo.lock", "src", "lua"];
    if Path::new(ROOT).join("build.rs").exists() {
        needed.extend(["build.rs", "proto"]);
    }
    for input in needed {
        assert!(
            copied.contains(input),
            "the Dockerfile does not copy {input} (it copies {copied:?})"
        );
    }
}

#[test]
fn the_compose_stack_mounts_files_the_repository_has() {
    let compose = std::fs::read_to_string(Path::new(ROOT).join("docker-compose.yml")).unwrap();
    let mounts: Vec<&str> = compose
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- ./"))
        .map(|m| m.split(':').next().unwrap())
        .collect();
    assert!(!mounts.is_empty(), "no mounts found");
    for m in mounts {
        assert!(
            Path::new(ROOT).join(m).exists(),
            "compose mounts ./{m}, which is not there"
        );
    }
}

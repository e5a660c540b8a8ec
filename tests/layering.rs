//! The layering of `src/`: no import loop between two files, every folder read top-down, no
//! file over 400 lines.
//!
//! Walks the module tree from `src/lib.rs` (following `mod x;` and `#[path]`), reads every
//! `use crate::…`, `super::…`, `self::…` and child-module path (in `use` items and inline in
//! code), and resolves each to the file that *defines* the item (through re-exports, so a
//! `mod.rs` that only re-exports its children is not a false loop). Two checks on that graph:
//! no strongly connected component of files, and in each folder no loop between its entries
//! (files and whole subfolders), so that a ring through `error.rs -> forward_auth/ ->
//! access_log.rs -> error.rs` fails even when it passes through different files of a
//! subfolder. A folder's `mod.rs` sits at its top and may import its children; a child that
//! imports an item defined in its parent's `mod.rs` closes a loop.
//!
//! Paths are read from the source text with comments and literals blanked, not from the
//! compiler; macros that build paths are not expanded.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

#[path = "layering/graph.rs"]
mod graph;
#[path = "layering/source.rs"]
mod source;

use graph::{edges, loops};
use source::{crate_files, SourceFile};

/// No source file may be longer than this.
const MAX_LINES: usize = 400;

/// Folders whose loops and long files are tolerated for now: none. A folder listed here would
/// still fail on a loop that reaches a file outside it.
const ALLOWED_UNDER: &[&str] = &[];

/// Whether a file lies in a folder whose loops and length are tolerated for now.
fn allowed(rel: &str) -> bool {
    ALLOWED_UNDER.iter().any(|dir| rel.starts_with(dir))
}

/// The crate's files and their import edges.
fn crate_graph() -> (Vec<SourceFile>, BTreeMap<(usize, usize), usize>) {
    let files = crate_files(Path::new(env!("CARGO_MANIFEST_DIR")));
    assert!(
        files.len() > 100,
        "the module walk found only {} files",
        files.len()
    );
    let edges = edges(&files);
    (files, edges)
}

/// Appends one loop to the report: its members and the edges that close it.
fn report_loop(report: &mut String, tolerated: bool, names: &[String], evidence: &[String]) {
    let verdict = if tolerated { "allowed" } else { "FAIL" };
    report.push_str(&format!("{verdict} loop: {}\n", names.join(", ")));
    for line in evidence {
        report.push_str(&format!("    {line}\n"));
    }
}

#[test]
fn no_import_loops_between_files() {
    let (files, edges) = crate_graph();
    let mut report = String::new();
    for component in loops(files.len(), &edges) {
        let names: Vec<String> = component.iter().map(|&f| files[f].rel.clone()).collect();
        let evidence: Vec<String> = edges
            .iter()
            .filter(|((a, b), _)| component.contains(a) && component.contains(b))
            .map(|(&(a, b), line)| format!("{}:{line} -> {}", files[a].rel, files[b].rel))
            .collect();
        report_loop(
            &mut report,
            names.iter().all(|n| allowed(n)),
            &names,
            &evidence,
        );
    }
    eprintln!("{report}");
    assert!(
        !report.contains("FAIL"),
        "import loops between files of src/:\n{report}"
    );
}

/// The entry of a folder (module) that holds a file: the child module it lies in, or `mod.rs`
/// for the folder's own file (which sits at the top of the folder).
fn entry_in(folder: &[String], file: &SourceFile) -> Option<String> {
    let n = folder.len();
    if file.module.len() < n || file.module[..n] != *folder {
        return None;
    }
    Some(
        file.module
            .get(n)
            .cloned()
            .unwrap_or_else(|| "mod.rs".into()),
    )
}

/// How a report names an entry of a folder: its file (`access_log.rs`, the folder's own
/// `mod.rs`) or its subfolder (`layer/`).
fn entry_label(files: &[SourceFile], folder: &[String], entry: &str) -> String {
    let n = folder.len();
    let under = |f: &&SourceFile| entry_in(folder, f).as_deref() == Some(entry);
    let deeper = files.iter().filter(under).any(|f| f.module.len() > n + 1);
    match files.iter().filter(under).find(|f| f.module.len() <= n + 1) {
        Some(f) if !deeper && !f.rel.ends_with("/mod.rs") || entry == "mod.rs" => f.rel.clone(),
        Some(f) => f.rel.trim_end_matches("mod.rs").to_string(),
        None => format!("src/{}/{entry}/", folder.join("/")),
    }
}

/// Every folder reads top-down: between the entries of one folder (its files and subfolders,
/// each subfolder taken whole) there is no loop. This is what the file-level check misses
/// when a ring passes through different files of a subfolder.
#[test]
fn each_folder_reads_top_down() {
    let (files, edges) = crate_graph();
    let folders: BTreeSet<Vec<String>> = files
        .iter()
        .flat_map(|f| (0..f.module.len()).map(|k| f.module[..k].to_vec()))
        .collect();
    let mut report = String::new();
    for folder in folders {
        let entries: Vec<String> = files
            .iter()
            .filter_map(|f| entry_in(&folder, f))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let index = |f: &SourceFile| {
            let entry = entry_in(&folder, f)?;
            entries.iter().position(|e| *e == entry)
        };
        let mut between = BTreeMap::new();
        for (&(a, b), line) in &edges {
            if let (Some(x), Some(y)) = (index(&files[a]), index(&files[b])) {
                if x != y {
                    between
                        .entry((x, y))
                        .or_insert(format!("{}:{line} -> {}", files[a].rel, files[b].rel));
                }
            }
        }
        let place = format!(
            "src/{}",
            folder.iter().map(|m| format!("{m}/")).collect::<String>()
        );
        for component in loops(entries.len(), &between.keys().map(|k| (*k, 0)).collect()) {
            let names: Vec<String> = component
                .iter()
                .map(|&e| entry_label(&files, &folder, &entries[e]))
                .collect();
            let evidence: Vec<String> = between
                .iter()
                .filter(|((a, b), _)| component.contains(a) && component.contains(b))
                .map(|(_, line)| line.clone())
                .collect();
            report_loop(&mut report, allowed(&place), &names, &evidence);
        }
    }
    eprintln!("{report}");
    assert!(
        !report.contains("FAIL"),
        "folders that do not read top-down:\n{report}"
    );
}

#[test]
fn no_source_file_over_400_lines() {
    let (files, _) = crate_graph();
    let long: Vec<String> = files
        .iter()
        .filter(|f| f.lines > MAX_LINES && !allowed(&f.rel))
        .map(|f| format!("{}: {} lines", f.rel, f.lines))
        .collect();
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines:\n{}",
        long.join("\n")
    );
}

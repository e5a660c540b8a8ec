//! Reading `src/`: the module tree from `src/lib.rs`, each file's code as tokens (comments
//! and literals blanked), and every path a file names.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

/// One token of blanked source: an identifier (or `::`, or one punctuation char) and its line.
#[derive(Clone, Debug)]
pub struct Tok {
    pub text: String,
    pub line: usize,
}

/// One file of the crate and the module it holds.
pub struct SourceFile {
    pub rel: String,
    pub module: Vec<String>,
    pub lines: usize,
    pub toks: Vec<Tok>,
}

/// A path found in a file: where it was written (module), its segments, the name a `use` gives
/// it (`as`), its line, and whether it is a `use` item at the top of the file (which other
/// files can reach through it).
pub struct FoundPath {
    pub module: Vec<String>,
    pub segs: Vec<String>,
    pub alias: Option<String>,
    pub line: usize,
    pub top_level_use: bool,
}

/// Blanks comments, string and char literals (keeping line breaks) so that only code remains.
fn blank(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let keep_newlines = |s: &[char], out: &mut String| {
        for ch in s {
            out.push(if *ch == '\n' { '\n' } else { ' ' });
        }
    };
    while i < c.len() {
        let prev_ident = i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_');
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            let end = (i..c.len()).find(|&j| c[j] == '\n').unwrap_or(c.len());
            keep_newlines(&c[i..end], &mut out);
            i = end;
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let (mut depth, mut j) = (1, i + 2);
            while j < c.len() && depth > 0 {
                if c[j] == '/' && c.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 1;
                } else if c[j] == '*' && c.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 1;
                }
                j += 1;
            }
            keep_newlines(&c[i..j.min(c.len())], &mut out);
            i = j;
        } else if c[i] == 'r' && !prev_ident && matches!(c.get(i + 1), Some('"') | Some('#')) {
            let hashes = c[i + 1..].iter().take_while(|&&h| h == '#').count();
            if c.get(i + 1 + hashes) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            let mut j = i + 2 + hashes;
            while j < c.len() && !(c[j] == '"' && c[j + 1..].iter().take(hashes).all(|&h| h == '#'))
            {
                j += 1;
            }
            let end = (j + 1 + hashes).min(c.len());
            keep_newlines(&c[i..end], &mut out);
            i = end;
        } else if c[i] == '"' {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(c.len());
            keep_newlines(&c[i..end], &mut out);
            i = end;
        } else if c[i] == '\'' && c.get(i + 1) == Some(&'\\') {
            let end = (i + 2..c.len())
                .find(|&j| c[j] == '\'')
                .map_or(c.len(), |j| j + 1);
            keep_newlines(&c[i..end], &mut out);
            i = end;
        } else if c[i] == '\'' && c.get(i + 2) == Some(&'\'') {
            out.push_str("   ");
            i += 3;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// Splits blanked source into identifiers, `::` and single punctuation characters.
fn tokens(code: &str) -> Vec<Tok> {
    let c: Vec<char> = code.chars().collect();
    let (mut toks, mut line, mut i) = (Vec::new(), 1, 0);
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let text = c[start..i].iter().collect();
            toks.push(Tok { text, line });
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            toks.push(Tok {
                text: "::".into(),
                line,
            });
            i += 2;
        } else {
            toks.push(Tok {
                text: ch.to_string(),
                line,
            });
            i += 1;
        }
    }
    toks
}

/// The `mod name;` declarations of a file (outside inline modules), with any `#[path]` file.
fn declared_modules(raw: &str, toks: &[Tok]) -> Vec<(String, Option<String>)> {
    let mut path_attrs = raw.split("#[path = \"").skip(1).map(|rest| {
        let file = rest.split('"').next().unwrap_or_default().to_string();
        let after = rest.split("mod ").nth(1).unwrap_or_default();
        (
            after
                .split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_string(),
            file,
        )
    });
    let attrs: HashMap<String, String> = path_attrs.by_ref().collect();
    let mut found = Vec::new();
    let mut depth = 0;
    for (i, t) in toks.iter().enumerate() {
        match t.text.as_str() {
            "{" => depth += 1,
            "}" => depth -= 1,
            "mod" if depth == 0 && toks.get(i + 2).is_some_and(|n| n.text == ";") => {
                let name = toks[i + 1].text.clone();
                found.push((name.clone(), attrs.get(&name).cloned()));
            }
            _ => {}
        }
    }
    found
}

/// Reads the crate's files by walking `mod` declarations from `src/lib.rs`.
pub fn crate_files(root: &Path) -> Vec<SourceFile> {
    let mut files = Vec::new();
    let mut todo = vec![(root.join("src/lib.rs"), Vec::<String>::new())];
    while let Some((path, module)) = todo.pop() {
        let raw = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        let toks = tokens(&blank(&raw));
        let name = path.file_name().unwrap().to_str().unwrap();
        let dir = path.parent().unwrap().to_path_buf();
        let child_dir = if name == "mod.rs" || name == "lib.rs" {
            dir.clone()
        } else {
            dir.join(path.file_stem().unwrap())
        };
        for (child, attr) in declared_modules(&raw, &toks) {
            let file: PathBuf = match attr {
                Some(file) => dir.join(file),
                None if child_dir.join(format!("{child}.rs")).exists() => {
                    child_dir.join(format!("{child}.rs"))
                }
                None => child_dir.join(&child).join("mod.rs"),
            };
            let mut m = module.clone();
            m.push(child);
            todo.push((file, m));
        }
        let rel = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let lines = raw.lines().count();
        files.push(SourceFile {
            rel,
            module,
            lines,
            toks,
        });
    }
    files.sort_by(|a, b| a.rel.cmp(&b.rel));
    files
}

/// A path a `use` item names, with the name it is given when renamed (`as`).
type UsePath = (Vec<String>, Option<String>);

/// Expands a use tree starting at `toks[i]` into full paths; returns them and the index after.
fn use_tree(toks: &[Tok], mut i: usize, prefix: &[String]) -> (Vec<UsePath>, usize) {
    let mut segs = prefix.to_vec();
    let (mut out, mut alias) = (Vec::new(), None);
    while i < toks.len() {
        match toks[i].text.as_str() {
            "::" => i += 1,
            "{" => {
                i += 1;
                while i < toks.len() && toks[i].text != "}" {
                    let (paths, next) = use_tree(toks, i, &segs);
                    out.extend(paths);
                    i = next;
                    if toks.get(i).is_some_and(|t| t.text == ",") {
                        i += 1;
                    }
                }
                return (out, i + 1);
            }
            "as" => {
                alias = toks.get(i + 1).map(|t| t.text.clone());
                i += 2;
            }
            "," | "}" | ";" => break,
            word => {
                segs.push(word.to_string());
                i += 1;
            }
        }
    }
    if segs.len() > prefix.len() {
        out.push((segs, alias));
    }
    (out, i)
}

/// Every path a file names: `use` trees, and inline paths of two or more segments that start
/// with a lower-case name (`crate::`, `super::`, `self::`, a child module, an imported module).
pub fn found_paths(file: &SourceFile) -> Vec<FoundPath> {
    let toks = &file.toks;
    let (mut found, mut inline_mods, mut depth) = (Vec::new(), Vec::<(String, i32)>::new(), 0);
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i].text;
        let after_path = i > 0 && matches!(toks[i - 1].text.as_str(), "::" | "." | "$");
        let mut module = file.module.clone();
        module.extend(inline_mods.iter().map(|(m, _)| m.clone()));
        if t == "mod" && toks.get(i + 2).is_some_and(|b| b.text == "{") {
            inline_mods.push((toks[i + 1].text.clone(), depth + 1));
        } else if t == "{" {
            depth += 1;
        } else if t == "}" {
            if inline_mods.last().is_some_and(|(_, d)| *d == depth) {
                inline_mods.pop();
            }
            depth -= 1;
        } else if t == "use" && !after_path {
            let (paths, next) = use_tree(toks, i + 1, &[]);
            let top_level_use = depth == 0 && inline_mods.is_empty();
            for (segs, alias) in paths {
                let line = toks[i].line;
                found.push(FoundPath {
                    module: module.clone(),
                    segs,
                    alias,
                    line,
                    top_level_use,
                });
            }
            i = next;
            continue;
        } else if !after_path && t.starts_with(|c: char| c.is_ascii_lowercase() || c == '_') {
            let mut segs = vec![t.clone()];
            let mut j = i + 1;
            while toks.get(j).is_some_and(|c| c.text == "::")
                && toks
                    .get(j + 1)
                    .is_some_and(|n| n.text.starts_with(is_ident_char))
            {
                segs.push(toks[j + 1].text.clone());
                j += 2;
            }
            if segs.len() > 1 {
                let line = toks[i].line;
                found.push(FoundPath {
                    module,
                    segs,
                    alias: None,
                    line,
                    top_level_use: false,
                });
                i = j;
                continue;
            }
        }
        i += 1;
    }
    found
}

pub fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The names each file defines itself (functions, types, traits, constants, macros, modules).
pub fn definitions(file: &SourceFile) -> BTreeSet<String> {
    const KEYWORDS: &[&str] = &[
        "fn", "struct", "enum", "trait", "type", "const", "static", "union", "mod",
    ];
    let toks = &file.toks;
    let mut names = BTreeSet::new();
    for (i, t) in toks.iter().enumerate() {
        let name = match t.text.as_str() {
            "macro_rules" => toks.get(i + 2),
            word if KEYWORDS.contains(&word) => toks.get(i + 1),
            _ => None,
        };
        if let Some(name) = name.filter(|n| n.text.starts_with(is_ident_char)) {
            names.insert(name.text.clone());
        }
    }
    names
}

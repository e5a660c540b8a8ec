//! The file graph of `src/`: each path resolved to the file that defines its item (through
//! re-exports and globs), and the loops (strongly connected components) of a graph.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::source::{definitions, found_paths, FoundPath, SourceFile};

/// What a path leads to: a file of the crate, another crate, or a name not found.
enum Found {
    File(usize),
    External,
    Missing,
}

/// The crate's file graph: which module lives in which file, what each file defines, and the
/// names its top-level `use` items bring in (absolute, or None for another crate's).
struct Graph {
    by_module: HashMap<Vec<String>, usize>,
    defines: Vec<BTreeSet<String>>,
    imports: Vec<HashMap<String, Option<Vec<String>>>>,
    globs: Vec<Vec<Vec<String>>>,
}

impl Graph {
    /// Turns a path written in `module` of `file` into an absolute one (None: another crate).
    fn absolute(&self, file: usize, module: &[String], segs: &[String]) -> Option<Vec<String>> {
        let mut base = module.to_vec();
        let mut rest = &segs[1..];
        match segs.first()?.as_str() {
            "crate" => base.clear(),
            "self" => {}
            "super" => {
                base.pop();
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            first => {
                let mut child = module.to_vec();
                child.push(first.to_string());
                if self.by_module.contains_key(&child) {
                    base = child;
                } else {
                    base = self.imports.get(file)?.get(first)?.clone()?;
                }
            }
        }
        base.extend(rest.iter().filter(|s| *s != "self").cloned());
        Some(base)
    }

    /// The file that defines what an absolute path names, following imports and globs.
    fn find(&self, abs: &[String], hops: usize) -> Found {
        let Some(k) = (0..=abs.len())
            .rev()
            .find(|k| self.by_module.contains_key(&abs[..*k]))
        else {
            return Found::Missing;
        };
        let file = self.by_module[&abs[..k]];
        let Some(name) = abs.get(k).filter(|n| *n != "*") else {
            return Found::File(file);
        };
        if self.defines[file].contains(name) {
            return Found::File(file);
        }
        if hops > 16 {
            return Found::Missing;
        }
        match self.imports[file].get(name) {
            Some(None) => return Found::External,
            Some(Some(target)) => {
                let mut path = target.clone();
                path.extend(abs[k + 1..].iter().cloned());
                return self.find(&path, hops + 1);
            }
            None => {}
        }
        for glob in &self.globs[file] {
            let mut path = glob.clone();
            path.extend(abs[k..].iter().cloned());
            if let found @ (Found::File(_) | Found::External) = self.find(&path, hops + 1) {
                return found;
            }
        }
        Found::Missing
    }

    /// The file an absolute path depends on: the defining file, or else the deepest module
    /// file the path names (None for another crate's item).
    fn resolve(&self, abs: &[String]) -> Option<usize> {
        match self.find(abs, 0) {
            Found::File(file) => Some(file),
            Found::External => None,
            Found::Missing => {
                let k = (0..=abs.len())
                    .rev()
                    .find(|k| self.by_module.contains_key(&abs[..*k]))?;
                Some(self.by_module[&abs[..k]])
            }
        }
    }
}

/// The file graph's edges, each with the first line that makes it.
pub fn edges(files: &[SourceFile]) -> BTreeMap<(usize, usize), usize> {
    let paths: Vec<Vec<FoundPath>> = files.iter().map(found_paths).collect();
    let mut graph = Graph {
        by_module: files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.module.clone(), i))
            .collect(),
        defines: files.iter().map(definitions).collect(),
        imports: Vec::new(),
        globs: Vec::new(),
    };
    for found in &paths {
        let (mut names, mut globs) = (HashMap::new(), Vec::new());
        for p in found.iter().filter(|p| p.top_level_use) {
            let abs = graph.absolute(usize::MAX, &p.module, &p.segs);
            let written = p.segs.iter().rev().find(|s| *s != "self");
            let last = p.alias.as_ref().or(written).cloned().unwrap_or_default();
            match abs {
                Some(abs) if last == "*" => globs.push(abs[..abs.len() - 1].to_vec()),
                Some(abs) => {
                    names.insert(last, Some(abs));
                }
                None if last != "*" => {
                    names.insert(last, None);
                }
                None => {}
            }
        }
        graph.imports.push(names);
        graph.globs.push(globs);
    }
    let mut out = BTreeMap::new();
    for (from, found) in paths.iter().enumerate() {
        for p in found {
            let Some(abs) = graph.absolute(from, &p.module, &p.segs) else {
                continue;
            };
            // A `use` of a whole module is no dependency by itself; its uses in code are.
            if p.top_level_use && graph.by_module.contains_key(&abs) {
                continue;
            }
            if let Some(to) = graph.resolve(&abs).filter(|to| *to != from) {
                out.entry((from, to)).or_insert(p.line);
            }
        }
    }
    out
}

/// Tarjan's strongly connected components with more than one file.
pub fn loops(n: usize, edges: &BTreeMap<(usize, usize), usize>) -> Vec<Vec<usize>> {
    let mut next: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(a, b) in edges.keys() {
        next[a].push(b);
    }
    let (mut index, mut low, mut on) = (vec![usize::MAX; n], vec![0; n], vec![false; n]);
    let (mut stack, mut out, mut counter) = (Vec::new(), Vec::new(), 0);
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0)];
        while let Some((v, child)) = work.pop() {
            if child == 0 {
                index[v] = counter;
                low[v] = counter;
                counter += 1;
                stack.push(v);
                on[v] = true;
            }
            if let Some(&w) = next[v].get(child) {
                work.push((v, child + 1));
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    out.push(component);
                }
            }
        }
    }
    out
}

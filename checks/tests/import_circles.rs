//! No import circle in the workspace: within each crate, the modules (one per file)
//! and the paths they name form a graph without cycles, so every module can be read
//! after the ones it uses.
//!
//! A module uses another when its code names a path into it: `crate::a::b::Item`,
//! `super::x`, `self::y`, in a `use` or anywhere in the code, resolved to the longest
//! module prefix (and through the `pub use` re-exports of the module it names). Two
//! kinds of names are not uses: a module naming one of its ancestors (a child uses
//! the types its parent defines, as `point/enter.rs` uses `Point`), and a parent
//! naming its children (declaring them, re-exporting them: a folder's face). Unit
//! tests (`#[cfg(test)] mod ... { }`) may use anything and are left out.

use checks::workspace_root;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates checked, by their `src` folder.
const CRATES: [&str; 3] = [
    "resilience-runtime/src",
    "resilience-macros/src",
    "resilience-admin/src",
];

/// A module path inside a crate: `[]` is the crate root, `["point", "enter"]` is
/// `crate::point::enter`.
type Module = Vec<String>;

/// Every `.rs` file of `src` with its module path (files named by `#[path]`, such as
/// the runtime's `private.rs`, are found by their file name).
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap();
            let mut parts: Vec<String> = rel
                .iter()
                .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
                .collect();
            match parts.last().map(String::as_str) {
                Some("mod") => {
                    parts.pop();
                }
                Some("lib" | "main") if parts.len() == 1 => parts.clear(),
                _ => {}
            }
            // The runtime's doorway is compiled as `__private` from `private.rs`.
            if parts == ["private"] {
                parts = vec!["__private".to_owned()];
            }
            out.insert(parts, path);
        }
    }
    out
}

/// The code of a file without comments and string literals (so that a path in a doc
/// comment or a message is not a use).
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut prev = ' ';
                for c in chars.by_ref() {
                    if prev == '*' && c == '/' {
                        break;
                    }
                    prev = c;
                }
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == '"' {
                        break;
                    }
                }
                out.push_str("\"\"");
            }
            // A char literal or a lifetime: skip a quoted char (`'"'`), keep the rest.
            '\'' => {
                let rest: String = chars.clone().take(3).collect();
                if rest.starts_with("\\") || rest.chars().nth(1) == Some('\'') {
                    for c in chars.by_ref() {
                        if c == '\'' {
                            break;
                        }
                    }
                } else {
                    out.push('\'');
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// The code without its test modules: `#[cfg(test)] mod name { ... }` (or a `cfg`
/// naming `test` among others, as `#[cfg(all(test, not(loom)))]`).
fn without_tests(code: &str) -> String {
    let mut out = code.to_owned();
    let mut from = 0;
    while let Some(found) = out[from..].find("#[cfg(") {
        let at = from + found;
        let Some(close) = out[at..].find(")]").map(|i| at + i + 2) else {
            break;
        };
        let attr = &out[at..close];
        let is_test = attr.contains("(test") || attr.contains(" test");
        let next = out[close..].trim_start();
        if !(is_test && next.starts_with("mod ")) {
            from = close;
            continue;
        }
        let Some(open) = out[close..].find('{').map(|i| close + i) else {
            break;
        };
        let mut depth = 0usize;
        let mut end = out.len();
        for (i, c) in out[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.replace_range(at..end, "");
        from = at;
    }
    out
}

/// Every path the code names that starts with `crate`, `super` or `self`, with `use`
/// groups (`use crate::a::{b, c::d}`) expanded.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let starts = ["crate::", "super::", "self::"];
        let at_word = i == 0
            || !(bytes[i - 1].is_alphanumeric() || bytes[i - 1] == '_' || bytes[i - 1] == ':');
        if at_word {
            if let Some(s) = starts.iter().find(|s| code_at(&bytes, i, s)) {
                let head = s.trim_end_matches("::").to_owned();
                let (list, next) = parse_tree(&bytes, i + s.len());
                for tail in list {
                    let mut p = vec![head.clone()];
                    p.extend(tail);
                    out.push(p);
                }
                i = next;
                continue;
            }
        }
        i += 1;
    }
    out
}

fn code_at(bytes: &[char], i: usize, s: &str) -> bool {
    s.chars()
        .enumerate()
        .all(|(k, c)| bytes.get(i + k) == Some(&c))
}

/// Parses `a::b::{c, d::e}` from `i`: the paths it names (each a list of segments)
/// and where it ends.
fn parse_tree(bytes: &[char], mut i: usize) -> (Vec<Vec<String>>, usize) {
    let mut prefix = Vec::new();
    loop {
        while bytes.get(i).is_some_and(|c| c.is_whitespace()) {
            i += 1;
        }
        if bytes.get(i) == Some(&'{') {
            i += 1;
            let mut all = Vec::new();
            loop {
                while bytes.get(i).is_some_and(|c| c.is_whitespace() || *c == ',') {
                    i += 1;
                }
                if bytes.get(i) == Some(&'}') || i >= bytes.len() {
                    i += 1;
                    break;
                }
                let (list, next) = parse_tree(bytes, i);
                for tail in list {
                    let mut p = prefix.clone();
                    p.extend(tail);
                    all.push(p);
                }
                if next == i {
                    i += 1;
                } else {
                    i = next;
                }
            }
            return (all, i);
        }
        let start = i;
        while bytes
            .get(i)
            .is_some_and(|c| c.is_alphanumeric() || *c == '_')
        {
            i += 1;
        }
        if i == start {
            return (vec![prefix], i);
        }
        prefix.push(bytes[start..i].iter().collect());
        if code_at(bytes, i, "::") {
            i += 2;
        } else {
            return (vec![prefix], i);
        }
    }
}

/// The module a path names from module `from`: its longest prefix that is a module
/// (after `crate`/`super`/`self`), following the `pub use` re-exports of the module
/// it lands in for the next segment.
fn target(
    from: &Module,
    path: &[String],
    known: &BTreeSet<Module>,
    reexports: &BTreeMap<(Module, String), Module>,
) -> Option<Module> {
    let mut module: Module = match path.first().map(String::as_str) {
        Some("crate") => Vec::new(),
        Some("self") => from.clone(),
        Some("super") => {
            let mut m = from.clone();
            m.pop();
            m
        }
        _ => return None,
    };
    let mut rest = &path[1..];
    // `super::super::...`
    while rest.first().is_some_and(|s| s == "super") {
        module.pop();
        rest = &rest[1..];
    }
    for seg in rest {
        let mut next = module.clone();
        next.push(seg.clone());
        if known.contains(&next) {
            module = next;
            continue;
        }
        if let Some(m) = reexports.get(&(module.clone(), seg.clone())) {
            return Some(m.clone());
        }
        break;
    }
    Some(module)
}

/// `pub use` (and `pub(crate) use`) re-exports of each module: (module, name) -> the
/// module the name comes from.
fn reexports(
    files: &BTreeMap<Module, PathBuf>,
    known: &BTreeSet<Module>,
) -> BTreeMap<(Module, String), Module> {
    let mut out = BTreeMap::new();
    // Two passes, so that a re-export of a re-export resolves.
    for _ in 0..3 {
        for (module, path) in files {
            let code = code_of(&std::fs::read_to_string(path).unwrap());
            for line in code.split(';') {
                let line = line.trim();
                let Some(rest) = line
                    .strip_prefix("pub use ")
                    .or_else(|| line.strip_prefix("pub(crate) use "))
                    .or_else(|| line.strip_prefix("pub(super) use "))
                else {
                    continue;
                };
                let rest = rest.trim();
                let full = if rest.starts_with("crate::")
                    || rest.starts_with("super::")
                    || rest.starts_with("self::")
                {
                    rest.to_owned()
                } else {
                    format!("self::{rest}")
                };
                for p in paths(&full) {
                    let Some(name) = p.last().cloned() else {
                        continue;
                    };
                    let name = name.rsplit(" as ").next().unwrap_or(&name).to_owned();
                    if let Some(t) = target(module, &p, known, &out) {
                        out.insert((module.clone(), name), t);
                    }
                }
            }
        }
    }
    out
}

/// Whether `a` is `b` or one of its ancestors.
fn is_ancestor(a: &Module, b: &Module) -> bool {
    a.len() <= b.len() && a[..] == b[..a.len()]
}

/// The module graph of a crate: module -> the modules it uses (see the file's docs).
fn graph(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let files = modules(src);
    let known: BTreeSet<Module> = files.keys().cloned().collect();
    let reexports = reexports(&files, &known);
    let mut graph = BTreeMap::new();
    for (module, path) in &files {
        let code = without_tests(&code_of(&std::fs::read_to_string(path).unwrap()));
        let mut uses = BTreeSet::new();
        for p in paths(&code) {
            let Some(t) = target(module, &p, &known, &reexports) else {
                continue;
            };
            // A child naming an ancestor, or a parent naming its own children.
            if is_ancestor(&t, module) || is_ancestor(module, &t) {
                continue;
            }
            uses.insert(t);
        }
        graph.insert(module.clone(), uses);
    }
    graph
}

/// Every cycle's modules (Tarjan's strongly connected components of two or more).
fn cycles(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct State<'g> {
        graph: &'g BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'g Module, usize>,
        low: BTreeMap<&'g Module, usize>,
        stack: Vec<&'g Module>,
        on_stack: BTreeSet<&'g Module>,
        next: usize,
        found: Vec<Vec<Module>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g Module) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let Some((w, _)) = s.graph.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                s.found.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.found
}

fn name(m: &Module) -> String {
    if m.is_empty() {
        "crate".to_owned()
    } else {
        m.join("::")
    }
}

#[test]
fn no_crate_has_an_import_circle() {
    let root = workspace_root();
    let mut report = Vec::new();
    for krate in CRATES {
        let g = graph(&root.join(krate));
        for cycle in cycles(&g) {
            // One path around the cycle, to say where to cut it.
            let set: BTreeSet<&Module> = cycle.iter().collect();
            let edges: Vec<String> = cycle
                .iter()
                .flat_map(|a| {
                    g[a].iter()
                        .filter(|b| set.contains(b))
                        .map(move |b| format!("{} -> {}", name(a), name(b)))
                })
                .collect();
            report.push(format!("{krate}: {}", edges.join(", ")));
        }
    }
    assert!(
        report.is_empty(),
        "import circles (a module uses another that uses it back, maybe through \
         others; move what both need to a module before them):\n  {}",
        report.join("\n  ")
    );
}

#[test]
fn the_check_sees_a_circle() {
    // Two modules naming each other through `crate::` and `super::`.
    let dir = std::env::temp_dir().join(format!("circles-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::write(dir.join("lib.rs"), "mod a; mod b;").unwrap();
    std::fs::write(dir.join("a/mod.rs"), "mod c; pub use c::C;").unwrap();
    std::fs::write(dir.join("a/c.rs"), "pub struct C(crate::b::B);").unwrap();
    std::fs::write(dir.join("b.rs"), "use crate::a::C; pub struct B;").unwrap();
    let g = graph(&dir);
    let found = cycles(&g);
    assert_eq!(found.len(), 1, "{g:?}");
    // A child naming its parent, and the parent re-exporting it, is no circle.
    std::fs::write(dir.join("b.rs"), "pub struct B;").unwrap();
    std::fs::write(dir.join("a/c.rs"), "pub struct C(super::D); ").unwrap();
    std::fs::write(dir.join("a/mod.rs"), "mod c; pub use c::C; pub struct D;").unwrap();
    assert!(cycles(&graph(&dir)).is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The runtime's feature folders: each builds on the engine, never the other way.
const FEATURES: [&str; 6] = [
    "redis",
    "tower",
    "heartbeat",
    "config",
    "metrics",
    "testing",
];

#[test]
fn no_engine_module_uses_a_feature_folder() {
    let g = graph(&workspace_root().join("resilience-runtime/src"));
    let feature = |m: &Module| m.first().is_some_and(|f| FEATURES.contains(&f.as_str()));
    let mut report = Vec::new();
    for (from, uses) in &g {
        // The crate root and the macros' doorway wire the features in.
        if from.is_empty() || feature(from) || from[0] == "__private" {
            continue;
        }
        for to in uses.iter().filter(|t| feature(t)) {
            report.push(format!("{} -> {}", name(from), name(to)));
        }
    }
    assert!(
        report.is_empty(),
        "engine modules naming a feature folder (let the feature plug in through a \
         trait or a hook the engine owns):\n  {}",
        report.join("\n  ")
    );
}

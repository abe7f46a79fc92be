//! The house in layers (docs/where-things-are.md), checked on the source as text: no module
//! of any crate depends on itself through others (a circle), and in each layered crate (core,
//! upstream, auth, proxy) no module imports from a layer above its own. Cargo keeps the arrows
//! between crates pointing down; this keeps them pointing down inside one. And no function
//! outside tests is over 100 lines (the longest reads as a list of steps), and tests longer
//! than that live in a `tests.rs` beside their module.
//!
//! A module's imports are the paths it names through `crate::` and `super::` (in `use` lines
//! and in code), outside comments and its `#[cfg(test)]` tail; a path names the deepest module
//! it reaches. An import of an ancestor (a child reading its parent's items) is not an edge:
//! the parent holds the child. Test files (`tests.rs`) are not rooms of the house.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each layered crate's layers, lowest first; a module takes the layer of its longest listed
/// prefix, and imports point to the module's own layer or below. Between crates, Cargo keeps
/// the order: route, core, then upstream and auth, then proxy, then rls and the gateway.
const LAYERS: &[(&str, &[(&str, u8)])] = &[
    (
        // The ground floor: answers' fields, the client's address, TLS, connection bounds and
        // errors; then the filters and the HTTP client; then what the gateway shows of itself.
        "crates/core",
        &[
            ("respond", 0),
            ("client_ip", 0),
            ("tls", 0),
            ("connections", 0),
            ("error", 0),
            ("filters", 1),
            ("net", 1),
            ("observe", 2),
        ],
    ),
    (
        // A target, its affinity, the retry budget; the pool of targets (and the cluster's
        // placements, core's `net::placed`); one request's attempts.
        "crates/upstream",
        &[
            ("target", 0),
            ("affinity", 0),
            ("budget", 0),
            ("outlier", 0),
            ("pool", 1),
            ("attempt", 2),
            ("health", 2),
        ],
    ),
    (
        // Caches, htpasswd files and the JWT family; the JWKS; the verifier; the methods.
        "crates/auth",
        &[
            ("cache", 0),
            ("htpasswd", 0),
            ("family", 0),
            ("jwks", 1),
            ("jwt", 2),
            ("api_key", 3),
            ("basic", 3),
            ("bearer", 3),
            ("forward", 3),
        ],
    ),
    (
        "crates/proxy",
        &[
            // L1: limits compiled, keys, the decision, slots.
            ("limits", 1),
            // L2: the serving state built from a config.
            ("runtime", 2),
            // L3: one request's state.
            ("ctx", 3),
            // L4: the request phases and stages, edge answers, the process, admin,
            // background jobs and the tools.
            ("answer", 4),
            ("inbound", 4),
            ("verdicts", 4),
            ("gateway", 4),
            ("stages", 4),
            ("shared", 4),
            ("admin", 4),
            ("housekeeping", 4),
            ("tools", 4),
            // The TLS listeners' front: before any request (uses the process's state).
            ("passthrough", 4),
        ],
    ),
];

type Module = Vec<String>;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every crate's source folder, by its name in the workspace (`crates/proxy`, `gateway`).
fn crates() -> Vec<(String, PathBuf)> {
    let mut out = vec![("gateway".to_string(), root().join("gateway/src"))];
    let mut dirs: Vec<_> = std::fs::read_dir(root().join("crates"))
        .expect("crates/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    dirs.sort();
    for d in dirs {
        let name = format!("crates/{}", d.file_name().expect("name").to_string_lossy());
        out.push((name, d.join("src")));
    }
    out
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs")
            && p.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(p);
        }
    }
}

/// `a/b.rs` is `[a, b]`, `a/mod.rs` is `[a]`, `lib.rs` and `main.rs` are `[]`; a binary in
/// `src/bin/` is a crate of its own and is skipped.
fn module_of(src: &Path, file: &Path) -> Option<Module> {
    let rel = file.strip_prefix(src).ok()?;
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
        parts.clear();
    } else if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    Some(parts)
}

/// The code of a file without comments and without its `#[cfg(test)]` tail.
fn code(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with("#[cfg(test)]") {
            break;
        }
        let t = line.trim_start();
        if t.starts_with("//") {
            continue;
        }
        // A trailing comment; `://` (in a string's URL) is not one.
        let cut = line
            .match_indices("//")
            .find(|(i, _)| *i == 0 || line.as_bytes()[i - 1] != b':')
            .map_or(line.len(), |(i, _)| i);
        out.push_str(&line[..cut]);
        out.push('\n');
    }
    out
}

fn ident_at(s: &[u8], mut i: usize) -> (String, usize) {
    let start = i;
    while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == b'_') {
        i += 1;
    }
    (String::from_utf8_lossy(&s[start..i]).into_owned(), i)
}

/// The paths named after `prefix` (`crate::` or `super::`): `a::b::c`, or each first-level
/// path of a `{a::b, c}` group.
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let s = code.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find(prefix) {
        let i = from + at;
        from = i + prefix.len();
        // `tollgate_proxy::crate` is no such thing, but `foo_super::` is not `super::`.
        // Part of a longer path (`super::super::`, `x::crate`) or of a longer name.
        if i > 0 && (s[i - 1].is_ascii_alphanumeric() || s[i - 1] == b'_' || s[i - 1] == b':') {
            continue;
        }
        out.extend(path_list(code, from));
    }
    out
}

fn path_list(code: &str, at: usize) -> Vec<Vec<String>> {
    let s = code.as_bytes();
    if s.get(at) == Some(&b'{') {
        // A group: split its first level on commas.
        let mut depth = 0;
        let mut start = at + 1;
        let mut out = Vec::new();
        for (j, &b) in s.iter().enumerate().skip(at) {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        out.extend(path_list(code, skip_ws(s, start)));
                        break;
                    }
                }
                b',' if depth == 1 => {
                    out.extend(path_list(code, skip_ws(s, start)));
                    start = j + 1;
                }
                _ => {}
            }
        }
        return out;
    }
    let mut path = Vec::new();
    let mut i = at;
    loop {
        let (id, end) = ident_at(s, i);
        if id.is_empty() {
            break;
        }
        path.push(id);
        if code[end..].starts_with("::") {
            i = end + 2;
            if s.get(i) == Some(&b'{') {
                // `a::{b, c}`: the prefix and each branch.
                let mut out = Vec::new();
                for branch in path_list(code, i) {
                    let mut p = path.clone();
                    p.extend(branch);
                    out.push(p);
                }
                return out;
            }
        } else {
            break;
        }
    }
    vec![path]
}

fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && s[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// A crate's modules and the modules each imports.
fn graph(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut files = Vec::new();
    rs_files(src, &mut files);
    let mut texts = BTreeMap::new();
    for f in &files {
        if let Some(m) = module_of(src, f) {
            texts.insert(m, code(&std::fs::read_to_string(f).expect("read")));
        }
    }
    let known: BTreeSet<Module> = texts.keys().cloned().collect();
    let resolve = |p: &[String]| -> Option<Module> {
        (1..=p.len())
            .rev()
            .map(|n| p[..n].to_vec())
            .find(|m| known.contains(m))
    };
    let mut g = BTreeMap::new();
    for (m, text) in &texts {
        let mut deps = BTreeSet::new();
        let mut named = paths_after(text, "crate::");
        for mut p in paths_after(text, "super::") {
            // `super::super::x`: one level up for each.
            let mut up = 1;
            while p.first().is_some_and(|s| s == "super") {
                p.remove(0);
                up += 1;
            }
            let mut full: Vec<String> = m[..m.len().saturating_sub(up)].to_vec();
            full.extend(p);
            named.push(full);
        }
        for p in named {
            if let Some(d) = resolve(&p) {
                let ancestor = d.len() <= m.len() && m[..d.len()] == d[..];
                if !ancestor {
                    deps.insert(d);
                }
            }
        }
        g.insert(m.clone(), deps);
    }
    g
}

/// The strongly connected components of more than one module (Tarjan's algorithm).
fn circles(g: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<BTreeSet<Module>> {
    struct T<'a> {
        g: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on: BTreeSet<&'a Module>,
        next: usize,
        out: Vec<BTreeSet<Module>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a Module) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        for w in t.g.get(v).into_iter().flatten() {
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).expect("low");
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).expect("low");
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = BTreeSet::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.insert(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn name(m: &Module) -> String {
    if m.is_empty() {
        "lib".to_string()
    } else {
        m.join("/")
    }
}

fn layer(layers: &[(&str, u8)], m: &Module) -> Option<u8> {
    let n = name(m);
    layers
        .iter()
        .filter(|(p, _)| n == *p || n.starts_with(&format!("{p}/")))
        .max_by_key(|(p, _)| p.len())
        .map(|&(_, l)| l)
}

#[test]
fn no_module_depends_on_itself_through_others() {
    let mut problems = Vec::new();
    for (krate, src) in crates() {
        for c in circles(&graph(&src)) {
            let names: Vec<String> = c.iter().map(|m| format!("{krate}:{}", name(m))).collect();
            problems.push(format!("a circle: {}", names.join(", ")));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn imports_point_down_each_crates_layers() {
    let mut problems = Vec::new();
    for (krate, layers) in LAYERS {
        let g = graph(&root().join(krate).join("src"));
        for (p, _) in *layers {
            if !g.keys().any(|m| name(m) == *p) {
                problems.push(format!("{krate}: LAYERS names {p}, which is no module"));
            }
        }
        for (m, deps) in &g {
            if m.is_empty() {
                continue;
            }
            let Some(lm) = layer(layers, m) else {
                problems.push(format!("{krate}: {} has no layer in LAYERS", name(m)));
                continue;
            };
            for d in deps {
                if let Some(ld) = layer(layers, d) {
                    if ld > lm {
                        problems.push(format!(
                            "{krate}: {} (L{lm}) imports {} (L{ld}), a layer above it",
                            name(m),
                            name(d)
                        ));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every source file of every crate (test files apart), as `crate/src/path` and its text.
fn sources() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (krate, src) in crates() {
        let mut files = Vec::new();
        rs_files(&src, &mut files);
        for f in files {
            let rel = f.strip_prefix(&src).unwrap_or(&f).display().to_string();
            let text = std::fs::read_to_string(&f).expect("read");
            out.push((format!("{krate}/src/{rel}"), text));
        }
    }
    out
}

/// Functions of at most this many lines (the `fn` line to the closing brace), outside tests.
const MAX_FN_LINES: usize = 100;

/// Each function's name, first line and length in a file's code before its `#[cfg(test)]`
/// tail: from a line that opens a `fn` (not a declaration) to the first line after it that
/// closes at the same indentation.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .iter()
        .position(|l| l.starts_with("#[cfg(test)]"))
        .unwrap_or(lines.len());
    let mut out = Vec::new();
    for (i, l) in lines[..end].iter().enumerate() {
        let t = l.trim_start();
        let indent = l.len() - t.len();
        let mut words = t.split_whitespace().peekable();
        while words.peek().is_some_and(|w| {
            w.starts_with("pub") || matches!(*w, "async" | "const" | "unsafe" | "extern" | "\"C\"")
        }) {
            words.next();
        }
        if words.next() != Some("fn") || t.trim_end().ends_with(';') {
            continue;
        }
        let name: String = words
            .next()
            .unwrap_or("")
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let close = lines[i + 1..].iter().position(|c| {
            let ct = c.trim_start();
            c.len() - ct.len() == indent && ct.starts_with('}')
        });
        if let Some(n) = close {
            out.push((name, i + 1, n + 2));
        }
    }
    out
}

#[test]
fn no_function_over_100_lines_outside_tests() {
    let mut problems = Vec::new();
    for (at, text) in sources() {
        for (name, line, n) in functions(&text) {
            if n > MAX_FN_LINES {
                problems.push(format!("{at}:{line}: fn {name} is {n} lines"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// An inline `mod tests { ... }` of at most this many lines; longer ones live beside their
/// module, in `foo/tests.rs` (as linkerd2-proxy keeps them).
const MAX_INLINE_TEST_LINES: usize = 100;

#[test]
fn long_test_modules_live_in_their_own_file() {
    let mut problems = Vec::new();
    for (at, text) in sources() {
        let lines: Vec<&str> = text.lines().collect();
        let Some(start) = lines.iter().position(|l| *l == "mod tests {") else {
            continue;
        };
        let end = lines[start..]
            .iter()
            .position(|l| *l == "}")
            .map_or(lines.len(), |n| start + n);
        if end - start > MAX_INLINE_TEST_LINES {
            problems.push(format!(
                "{at}: its tests are {} lines inline: move them to a tests.rs beside it",
                end - start
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The checker itself: it sees a planted circle and a planted upward import, through `use`
/// groups, `super::` and paths in code, and not through comments or test code.
#[test]
fn the_checker_sees_what_it_must_and_nothing_else() {
    let dir = std::env::temp_dir().join(format!("tollgate-layers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("a")).expect("mkdir");
    let w = |p: &str, t: &str| std::fs::write(dir.join(p), t).expect("write");
    w("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n");
    w("a/mod.rs", "pub mod x;\nuse crate::{b::Thing, c};\n");
    w("a/x.rs", "fn f() { super::super::c::g(); }\n");
    w(
        "b.rs",
        "// use crate::c;\nlet u = \"http://example/\"; // crate::c\n#[cfg(test)]\nmod tests { use crate::c; }\n",
    );
    w("c.rs", "fn g() { crate::a::x::f() }\n");
    let g = graph(&dir);
    let m = |s: &str| -> Module { s.split('/').map(str::to_string).collect() };
    assert_eq!(g[&m("a")], [m("b"), m("c")].into_iter().collect());
    assert_eq!(g[&m("a/x")], [m("c")].into_iter().collect());
    assert!(g[&m("b")].is_empty(), "{:?}", g[&m("b")]);
    assert_eq!(g[&m("c")], [m("a/x")].into_iter().collect());
    let cs = circles(&g);
    assert_eq!(cs, vec![[m("a/x"), m("c")].into_iter().collect()]);
    let long = format!(
        "pub async fn f(\n    a: u8,\n) {{\n{}}}\nfn g();\n    fn h() {{\n    }}\n#[cfg(test)]\nfn t() {{\n}}\n",
        "    x();\n".repeat(3)
    );
    assert_eq!(
        functions(&long),
        vec![("f".to_string(), 1, 7), ("h".to_string(), 9, 2)]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

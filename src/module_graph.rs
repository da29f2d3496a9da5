//! The house's floors, checked: every top-level module of the library imports only from
//! modules on a lower floor, so there is no import circle. The test reads `src/**/*.rs`, takes
//! every `crate::<module>` path outside comments as an edge between top-level modules, and
//! checks each edge against [`FLOORS`]. A new module gets a floor here; an edge that goes up
//! or sideways fails with the file and line that made it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The floors, lowest first. A module may import from any module on a lower floor, never from
/// its own floor or a higher one.
const FLOORS: &[&[&str]] = &[
    // Facts and pure values: no imports of the crate at all.
    &[
        "protocol",
        "problem",
        "logging",
        "error",
        "namespace",
        "uri",
        "cursor",
        "subscriptions",
        "catalog",
        "spine",
        "ready_file",
    ],
    // Pure decisions over the facts, the folder server (an MCP server of its own), and the
    // byte-level rules of MCP over HTTP (from `protocol` only).
    &["policy", "serve_dir", "wire"],
    // Validated configuration.
    &["config"],
    // Identity, instruments and the accept loop.
    &["auth", "metrics", "listener", "mcp_json"],
    // Stores and queues.
    &["cache", "fanout"],
    // Upstream connections.
    &["upstream"],
    // Cache coherence (holds upstream handles in its watch book).
    &["coherence", "tools"],
    // The admin listener (given the status by whoever serves it).
    &["admin"],
    // The proxy core.
    &["proxy"],
    // Resources as the proxy's own tools, over the proxy's resource paths.
    &["bridge"],
    // The hosts' side.
    &["downstream"],
];

/// The crate's roots and this check: not floors.
const ROOTS: &[&str] = &["lib", "main", "bin", "module_graph"];

/// One import between top-level modules, with where it is written.
#[derive(Debug)]
struct Edge {
    from: String,
    to: String,
    at: String,
}

fn source_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            source_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The top-level module a file belongs to: `src/config/access.rs` → `config`.
fn module_of(src: &Path, file: &Path) -> String {
    let first = file.strip_prefix(src).expect("under src").components().next().expect("a component");
    let name = first.as_os_str().to_string_lossy();
    name.strip_suffix(".rs").unwrap_or(&name).to_string()
}

/// Every `crate::<name>` in code (comments skipped), with its line number.
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let preceded = rest[..at].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_');
            rest = &rest[at + "crate::".len()..];
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !preceded && !name.is_empty() {
                found.push((index + 1, name));
            }
        }
        // `use crate::{a, b::c}` names several modules at once.
        if let Some(group) = code.split("use crate::{").nth(1) {
            for item in group.split([',', '}']) {
                let name: String = item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    found.push((index + 1, name));
                }
            }
        }
    }
    found
}

fn edges() -> Vec<Edge> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let mut edges = Vec::new();
    for file in files {
        let from = module_of(&src, &file);
        if ROOTS.contains(&from.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a source file is readable");
        for (line, to) in crate_paths(&text) {
            if to != from {
                let at = format!("{}:{line}", file.strip_prefix(&src).unwrap_or(&file).display());
                edges.push(Edge { from: from.clone(), to, at });
            }
        }
    }
    edges
}

fn floor_of(module: &str) -> Option<usize> {
    FLOORS.iter().position(|floor| floor.contains(&module))
}

/// A circle in the graph, if there is one (depth-first search with colours).
fn find_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|n| n == node) {
            let mut circle = path[start..].to_vec();
            circle.push(node.to_string());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn every_module_has_a_floor_and_imports_only_from_lower_floors() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(&src, f)).collect();
    let homeless: Vec<&String> =
        modules.iter().filter(|m| !ROOTS.contains(&m.as_str()) && floor_of(m).is_none()).collect();
    assert!(homeless.is_empty(), "modules without a floor in src/module_graph.rs FLOORS: {homeless:?}");
    let wrong: Vec<String> = edges()
        .into_iter()
        .filter(|e| floor_of(&e.to).is_some() && floor_of(&e.to) >= floor_of(&e.from))
        .map(|e| format!("{} imports {} ({})", e.from, e.to, e.at))
        .collect();
    assert!(wrong.is_empty(), "imports that go up or sideways:\n{}", wrong.join("\n"));
}

#[test]
fn the_module_graph_has_no_circles() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for edge in edges() {
        graph.entry(edge.from).or_default().insert(edge.to);
    }
    assert!(graph.len() > 10, "the scan found the modules: {graph:?}");
    assert_eq!(find_circle(&graph), None, "an import circle");
}

#[test]
fn the_scan_sees_every_form_of_a_crate_path() {
    let text = "use crate::config::Config;\nuse crate::{cache, metrics::Metrics};\n// crate::admin\nlet x = crate::uri::check();\nuse foocrate::x;";
    let names: Vec<String> = crate_paths(text).into_iter().map(|(_, name)| name).collect();
    assert_eq!(names, ["config", "cache", "metrics", "uri"]);
    let circle: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a")]
        .into_iter()
        .map(|(from, to)| (from.to_string(), BTreeSet::from([to.to_string()])))
        .collect();
    assert_eq!(find_circle(&circle), Some(["a", "b", "c", "a"].map(String::from).to_vec()));
}

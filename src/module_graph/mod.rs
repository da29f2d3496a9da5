//! The house's layer rules, checked by reading `src/**/*.rs` (`scan`: every module path outside
//! comments — `crate::`, `super::`, `self::`, groups, re-exports — resolved to its module):
//! - floors: every top-level module imports only from modules on a lower floor ([`FLOORS`]),
//!   so there is no import circle between them; a new module gets a floor here, and an edge
//!   that goes up or sideways fails with the file and line that made it;
//! - `submodules`: no import circle among the sub-modules of any module either;
//! - `traits`: neither rmcp edge (`upstream`, `downstream`) has its traits implemented outside
//!   it — what an upstream call needs of its host is a ground-floor contract (`host`);
//! - `tasks`: no unbounded channel, and long-lived tasks only through the spine.

mod scan;
mod submodules;
mod tasks;
mod traits;

use std::collections::{BTreeMap, BTreeSet};

use self::scan::Crate;

/// The floors, lowest first. A module may import from any module on a lower floor, never from
/// its own floor or a higher one.
const FLOORS: &[&[&str]] = &[
    // The one crypto provider (ring): no imports of the crate at all.
    &["crypto"],
    // Facts and pure values: nothing of the crate but `crypto`.
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
        "host",
    ],
    // Pure decisions over the facts, the folder server (an MCP server of its own), and the
    // byte-level rules of MCP over HTTP (from `protocol` only).
    &["policy", "serve_dir", "wire"],
    // Validated configuration.
    &["config"],
    // Identity, instruments, the accept loop and the rate limits' buckets.
    &["auth", "metrics", "listener", "mcp_json", "rate_limits"],
    // Stores and queues: the audit trail's; the cluster's shared state (Redis) and derived keys.
    &["cache", "fanout", "audit", "cluster"],
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

/// Every import from one top-level module into another (test code included).
fn edges() -> Vec<Edge> {
    let sources = scan::sources();
    let krate = Crate::new(&sources);
    let mut edges = Vec::new();
    for source in &sources {
        let from = &source.module[0];
        if ROOTS.contains(&from.as_str()) {
            continue;
        }
        for reference in krate.references(source) {
            match reference.target.first() {
                Some(to) if to != from => {
                    let at = format!("{}:{}", source.file, reference.line);
                    edges.push(Edge { from: from.clone(), to: to.clone(), at });
                }
                _ => {}
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
    let modules: BTreeSet<String> = scan::sources().into_iter().map(|s| s.module[0].clone()).collect();
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
fn the_scan_sees_every_form_of_a_module_path() {
    let text = "use crate::config::Config;\nuse crate::{cache, metrics::Metrics};\n// crate::admin\nlet x = crate::uri::check();\nuse foocrate::x;\nuse super::{a,\n    b::{c, d}};\nuse self::e::F;";
    let paths: Vec<String> =
        scan::paths(&scan::strip_comments(text)).into_iter().map(|(_, path)| path.join("::")).collect();
    assert_eq!(
        paths,
        [
            "crate::config::Config",
            "crate::cache",
            "crate::metrics::Metrics",
            "crate::uri::check",
            "super::a",
            "super::b::c",
            "super::b::d",
            "self::e::F"
        ]
    );
    let circle: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a")]
        .into_iter()
        .map(|(from, to)| (from.to_string(), BTreeSet::from([to.to_string()])))
        .collect();
    assert_eq!(find_circle(&circle), Some(["a", "b", "c", "a"].map(String::from).to_vec()));
}

//! The house rules of ARCHITECTURE.md ("Floors"), checked by reading the workspace's sources as
//! text (`scan`: every module path outside comments — `crate::`, `super::`, `self::`, groups,
//! re-exports — resolved to its module). Nothing of the library is used: the rules live outside
//! the product crate.
//! - here: no import circle between the top-level modules of any crate of the workspace (the
//!   product, `crates/fixture`, `crates/bench`);
//! - `floors`: in the product, every top-level module imports only from modules on a lower
//!   floor, and only along the edges listed there; the rules between modules are stated, and
//!   the edges known to break them are a list that may only shrink;
//! - `submodules`: no import circle among the sub-modules of any module of any crate either;
//! - `traits`: neither rmcp edge (`upstream`, `downstream`) has its traits implemented outside
//!   it — what an upstream call needs of its host is a ground-floor contract (`host`);
//! - `tasks`: no unbounded channel, and long-lived tasks only through the spine;
//! - `gone`: a second way of doing something, once removed, stays removed (its names listed).

mod floors;
mod gone;
mod scan;
mod submodules;
mod tasks;
mod traits;

use std::collections::{BTreeMap, BTreeSet};

use self::scan::{Crate, ModulePath};

/// The product crate's source folder.
const PRODUCT: &str = "src";

/// The source folder of every crate of the workspace.
const CRATES: &[&str] = &[PRODUCT, "crates/fixture/src", "crates/bench/src"];

/// A crate's roots (`lib.rs`, `main.rs` and the files of its `main/` or `bin/` folder): not
/// modules of its graph.
const ROOTS: &[&str] = &["lib", "main", "bin"];

/// One import from a top-level module into another, with where it is written.
#[derive(Debug)]
struct Edge {
    from: String,
    /// The module it lands in, in full (`cluster::peers`); its first segment is the
    /// top-level module.
    to: ModulePath,
    /// The importing file, relative to its crate's source folder.
    file: String,
    line: usize,
}

impl Edge {
    fn to(&self) -> &str {
        &self.to[0]
    }

    fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// Every import from one top-level module of the crate at `folder` into another (test code
/// included).
fn edges(folder: &str) -> Vec<Edge> {
    let sources = scan::sources(folder);
    let krate = Crate::new(&sources);
    let mut edges = Vec::new();
    for source in &sources {
        let from = &source.module[0];
        if ROOTS.contains(&from.as_str()) {
            continue;
        }
        for reference in krate.references(source) {
            if reference.target.first().is_some_and(|to| to != from) {
                let (file, line) = (source.file.clone(), reference.line);
                edges.push(Edge { from: from.clone(), to: reference.target, file, line });
            }
        }
    }
    edges
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
fn no_crate_has_a_circle_among_its_modules() {
    let mut circles = Vec::new();
    for folder in CRATES {
        let edges = edges(folder);
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut places: BTreeMap<(String, String), String> = BTreeMap::new();
        for edge in &edges {
            graph.entry(edge.from.clone()).or_default().insert(edge.to().to_string());
            places.entry((edge.from.clone(), edge.to().to_string())).or_insert_with(|| edge.at());
        }
        assert!(graph.len() > 2, "the scan found the modules of {folder}: {graph:?}");
        if let Some(circle) = find_circle(&graph) {
            let at: Vec<&str> =
                circle.windows(2).map(|pair| places[&(pair[0].clone(), pair[1].clone())].as_str()).collect();
            circles.push(format!("in {folder}: {} ({})", circle.join(" → "), at.join(", ")));
        }
    }
    assert!(circles.is_empty(), "import circles between modules:\n{}", circles.join("\n"));
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

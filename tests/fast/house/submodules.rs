//! No circle inside a module either: in every crate of the workspace, among the sub-modules of
//! any module (`proxy::lists`, `proxy::views`, … or `downstream::fast::parse`,
//! `downstream::fast::reply`, …), an import of
//! one by another (through `super::`, `self::`, `crate::` or a name the parent re-exports) is an
//! edge, and those edges form no circle. Test code (an inline `mod tests`, a `tests` module) is
//! left out: a test may reach anywhere in its module.

use std::collections::{BTreeMap, BTreeSet};

use super::scan::{self, Crate, ModulePath};
use super::{CRATES, PRODUCT, find_circle};

/// Circles known and being removed, as the edge that closes each (crate's source folder,
/// parent, from, to). Each entry
/// says why it is still here; an entry whose edge is gone fails the test, so it is dropped then.
const BEING_REMOVED: &[(&str, &str, &str, &str)] = &[];

/// Sub-module imports, by parent module: parent → (sub-module → sub-modules it imports), each
/// edge with the first place it is written.
type Graphs = BTreeMap<ModulePath, BTreeMap<String, BTreeMap<String, String>>>;

fn graphs(folder: &str) -> Graphs {
    let sources = scan::sources(folder);
    let krate = Crate::new(&sources);
    let mut graphs = Graphs::new();
    for source in &sources {
        for reference in krate.references(source).into_iter().filter(|r| !r.in_tests) {
            let shared = source.module.iter().zip(&reference.target).take_while(|(a, b)| a == b).count();
            let (Some(from), Some(to)) = (source.module.get(shared), reference.target.get(shared)) else {
                continue;
            };
            if shared == 0 {
                continue; // Between top-level modules: the floors' test.
            }
            let at = format!("{}:{}", source.file, reference.line);
            let edges = graphs.entry(source.module[..shared].to_vec()).or_default();
            edges.entry(from.clone()).or_default().entry(to.clone()).or_insert(at);
        }
    }
    graphs
}

#[test]
fn no_module_has_a_circle_among_its_sub_modules() {
    let mut circles = Vec::new();
    for folder in CRATES {
        let mut graphs = graphs(folder);
        if *folder == PRODUCT {
            assert!(
                graphs.contains_key(&vec!["upstream".to_string()]),
                "the scan found sub-module imports: {graphs:?}"
            );
        }
        for (_, parent, from, to) in BEING_REMOVED.iter().filter(|(f, ..)| f == folder) {
            let edges = graphs.get_mut(&vec![parent.to_string()]).and_then(|g| g.get_mut(*from));
            let removed = edges.and_then(|edges| edges.remove(*to));
            assert!(removed.is_some(), "{parent}: {from} no longer imports {to}: drop it from BEING_REMOVED");
        }
        circles.extend(circles_in(folder, &graphs));
    }
    assert!(circles.is_empty(), "import circles among sub-modules:\n{}", circles.join("\n"));
}

/// Each module's circle among its sub-modules, if it has one, with the places that make it.
fn circles_in(folder: &str, graphs: &Graphs) -> Vec<String> {
    graphs
        .iter()
        .filter_map(|(parent, edges)| {
            let graph: BTreeMap<String, BTreeSet<String>> =
                edges.iter().map(|(from, to)| (from.clone(), to.keys().cloned().collect())).collect();
            let circle = find_circle(&graph)?;
            let places: Vec<&str> = circle.windows(2).map(|pair| edges[&pair[0]][&pair[1]].as_str()).collect();
            Some(format!("in {folder}: {}: {} ({})", parent.join("::"), circle.join(" → "), places.join(", ")))
        })
        .collect()
}

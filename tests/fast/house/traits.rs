//! No trait edge from the hosts' side into the upstream side (or back): a trait defined in one
//! of the two rmcp edges, `upstream` and `downstream`, is implemented only inside it. What an
//! upstream call needs from its host (`host::HostRelay`, `host::ProgressOutlet`) is a contract on
//! the ground floor that both import; the composition hands the host's implementation down.

use std::collections::BTreeMap;

use super::{PRODUCT, scan};

/// The modules that talk rmcp to the outside: neither implements the other's traits.
const EDGES: &[&str] = &["upstream", "downstream"];

/// Every trait declared in `text`, by name.
fn traits_declared(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let code = line.trim_start();
            let code = ["pub trait ", "pub(crate) trait ", "pub(super) trait ", "trait "]
                .iter()
                .find_map(|p| code.strip_prefix(p))?;
            Some(code.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect())
        })
        .collect()
}

/// Every trait implemented in `text` (`impl … Name for …`, the last path segment), with its line.
fn traits_implemented(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let code = line.trim_start();
        let Some(rest) = code.strip_prefix("impl") else { continue };
        let rest = match rest.chars().next() {
            Some('<') => after_generics(rest),
            Some(' ') => rest,
            _ => continue,
        };
        let Some((head, _)) = rest.split_once(" for ") else { continue };
        let head = head.trim();
        let name = head.split('<').next().unwrap_or_default().rsplit("::").next().unwrap_or_default();
        if !name.is_empty() {
            found.push((index + 1, name.to_string()));
        }
    }
    found
}

/// The text after the `<…>` it starts with.
fn after_generics(text: &str) -> &str {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '<' => depth += 1,
            '>' if depth == 1 => return &text[i + 1..],
            '>' => depth -= 1,
            _ => {}
        }
    }
    ""
}

#[test]
fn no_edge_module_has_its_traits_implemented_elsewhere() {
    let sources = scan::sources(PRODUCT);
    let mut defined: BTreeMap<String, String> = BTreeMap::new();
    for source in &sources {
        for name in traits_declared(&scan::strip_comments(&source.text)) {
            defined.insert(name, source.module[0].clone());
        }
    }
    assert!(defined.contains_key("HostRelay"), "the scan found the traits: {defined:?}");
    let wrong: Vec<String> = sources
        .iter()
        .flat_map(|source| {
            let module = &source.module[0];
            traits_implemented(&scan::strip_comments(&source.text))
                .into_iter()
                .filter(|(_, name)| {
                    defined.get(name).is_some_and(|home| home != module && EDGES.contains(&home.as_str()))
                })
                .map(|(line, name)| format!("{}:{line} implements {}::{name}", source.file, defined[&name]))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(wrong.is_empty(), "traits of an rmcp edge implemented outside it:\n{}", wrong.join("\n"));
}

#[test]
fn the_scan_sees_declared_and_implemented_traits() {
    let text = "pub trait HostRelay: Send {\nimpl HostRelay for HostCall {\nimpl<T: Clone> crate::host::Outlet for Q<T> {\nimpl Foo {";
    assert_eq!(traits_declared(text), ["HostRelay"]);
    assert_eq!(traits_implemented(text), [(2, "HostRelay".to_string()), (3, "Outlet".to_string())]);
}

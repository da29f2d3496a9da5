//! The source scan behind the house rules: which module each file of a crate is, and every
//! module path a file names (`crate::…`, `super::…`, `self::…`, groups `{a, b::c}` included, over several
//! lines), resolved to the module it lands in. A name a module root re-exports from one of its
//! sub-modules (`pub use self::relay::HostRelay`) lands in that sub-module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::support::repo_root;

/// A module by its path from the crate root: `src/downstream/fast/parse.rs` → `downstream::fast::parse`.
pub type ModulePath = Vec<String>;

/// One file of a crate, read.
pub struct Source {
    /// Where it is, relative to its crate's source folder (`upstream/mod.rs`).
    pub file: String,
    pub module: ModulePath,
    pub text: String,
}

/// One module path a file names, resolved, with the line it is written on.
#[derive(Debug, PartialEq)]
pub struct Reference {
    pub line: usize,
    pub target: ModulePath,
    /// Written in test code (an inline `mod tests`, or a `tests` module's file).
    pub in_tests: bool,
}

/// Every `.rs` file under `folder`, a crate's source folder relative to the workspace root
/// (`src`, `crates/fixture/src`).
pub fn sources(folder: &str) -> Vec<Source> {
    let src = repo_root().join(folder);
    let mut files = Vec::new();
    walk(&src, &mut files);
    files
        .into_iter()
        .map(|path| {
            let relative = path.strip_prefix(&src).expect("under src");
            Source {
                file: relative.display().to_string(),
                module: module_of(relative),
                text: std::fs::read_to_string(&path).expect("a source file is readable"),
            }
        })
        .collect()
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            walk(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The module a file (relative to its source folder) is: `config/access.rs` → `config::access`,
/// `upstream/mod.rs` → `upstream`, and `thin/sse_tests.rs` (a `#[path]` child of `sse`) →
/// `thin::sse::tests`.
pub fn module_of(relative: &Path) -> ModulePath {
    let mut module: ModulePath = relative.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    let last = module.pop().unwrap_or_default();
    let stem = last.strip_suffix(".rs").unwrap_or(&last);
    match stem {
        "mod" => {}
        _ => match stem.strip_suffix("_tests") {
            Some(parent) => module.extend([parent.to_string(), "tests".to_string()]),
            None => module.push(stem.to_string()),
        },
    }
    module
}

/// What the scan knows of a crate: its modules, and the names each module root re-exports
/// from its sub-modules.
pub struct Crate {
    modules: BTreeSet<ModulePath>,
    exports: BTreeMap<ModulePath, BTreeMap<String, String>>,
}

impl Crate {
    pub fn new(sources: &[Source]) -> Crate {
        let modules: BTreeSet<ModulePath> = sources.iter().map(|s| s.module.clone()).collect();
        let mut exports = BTreeMap::new();
        for source in sources {
            let children: BTreeSet<&str> = modules
                .iter()
                .filter(|m| m.len() == source.module.len() + 1 && m.starts_with(&source.module))
                .map(|m| m[m.len() - 1].as_str())
                .collect();
            let found = reexports(&strip_comments(&source.text), &children);
            if !found.is_empty() {
                exports.insert(source.module.clone(), found);
            }
        }
        Crate { modules, exports }
    }

    /// Every module path `source` names, resolved.
    pub fn references(&self, source: &Source) -> Vec<Reference> {
        let text = strip_comments(&source.text);
        let inline = inline_module_at(&text);
        paths(&text)
            .into_iter()
            .filter_map(|(at, path)| {
                let inside = inline.is_some_and(|start| at > start);
                let line = text[..at].matches('\n').count() + 1;
                let in_tests = inside || source.module.iter().any(|m| m == "tests");
                self.resolve(&source.module, inside, &path).map(|target| Reference { line, target, in_tests })
            })
            .collect()
    }

    /// The module `path` (as written in `here`) lands in: the longest known module it starts
    /// with, then through that module's re-exports.
    fn resolve(&self, here: &[String], inline: bool, path: &[String]) -> Option<ModulePath> {
        let mut absolute: ModulePath = here.to_vec();
        if inline {
            absolute.push("tests".to_string());
        }
        let mut segments = path.iter().peekable();
        match segments.next()?.as_str() {
            "crate" => absolute.clear(),
            "self" => {}
            "super" => {
                absolute.pop()?;
                while segments.next_if(|s| *s == "super").is_some() {
                    absolute.pop()?;
                }
            }
            _ => return None,
        }
        let mut target = absolute;
        target.truncate(self.known_prefix(&target));
        for segment in segments {
            let mut next = target.clone();
            next.push(segment.clone());
            if self.modules.contains(&next) {
                target = next;
            } else {
                if let Some(child) = self.exports.get(&target).and_then(|e| e.get(segment)) {
                    target.push(child.clone());
                }
                break;
            }
        }
        Some(target)
    }

    fn known_prefix(&self, path: &[String]) -> usize {
        (1..=path.len()).rev().find(|n| self.modules.contains(&path[..*n])).unwrap_or(0)
    }
}

/// The text with `//` comments blanked (line breaks kept, so offsets still give lines).
pub fn strip_comments(text: &str) -> String {
    text.lines().map(|line| line.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n")
}

/// Where the first inline module (`mod tests { … }`, last in a file) begins: `super` inside it
/// is the file's own module.
fn inline_module_at(text: &str) -> Option<usize> {
    let mut offset = 0;
    for line in text.split('\n') {
        let code = line.trim_start();
        let code = code.strip_prefix("pub ").unwrap_or(code);
        if code.starts_with("mod ") && code.trim_end().ends_with('{') {
            return Some(offset);
        }
        offset += line.len() + 1;
    }
    None
}

/// Every path starting with `crate::`, `super::` or `self::` (not part of a longer name), with
/// its offset; a group `{a, b::c}` gives one path per member.
pub fn paths(text: &str) -> Vec<(usize, Vec<String>)> {
    let mut found = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        for (at, _) in text.match_indices(start) {
            let preceded = text[..at].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
            if !preceded {
                let mut members = Vec::new();
                path_at(&text[at..], Vec::new(), &mut members);
                found.extend(members.into_iter().map(|path| (at, path)));
            }
        }
    }
    found.sort();
    found
}

/// The path(s) at the start of `text`, each prefixed by `prefix`.
fn path_at(text: &str, mut prefix: Vec<String>, found: &mut Vec<Vec<String>>) {
    let mut rest = text;
    loop {
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if name.is_empty() {
            break;
        }
        prefix.push(name.clone());
        rest = &rest[name.len()..];
        match rest.strip_prefix("::") {
            Some(after) => rest = after.trim_start(),
            None => break,
        }
    }
    match rest.strip_prefix('{') {
        Some(group) => {
            for member in split_group(group) {
                path_at(member.trim_start(), prefix.clone(), found);
            }
        }
        None => found.push(prefix),
    }
}

/// The members of a `{…}` group (the text after its `{`), split at top-level commas.
fn split_group(group: &str) -> Vec<&str> {
    let (mut depth, mut start, mut members) = (0usize, 0, Vec::new());
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                members.push(&group[start..i]);
                return members;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                members.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    members
}

/// The names a module root re-exports from its children: `pub use self::relay::{A, B}` or
/// `pub(crate) use relay::A` → `A` and `B` live in `relay`.
fn reexports(text: &str, children: &BTreeSet<&str>) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    for statement in text.split(';') {
        let statement = statement.trim();
        let Some(used) =
            ["pub use ", "pub(crate) use ", "pub(super) use "].iter().find_map(|p| statement.strip_prefix(p))
        else {
            continue;
        };
        let used = used.strip_prefix("self::").unwrap_or(used);
        let mut members = Vec::new();
        path_at(used, Vec::new(), &mut members);
        for member in members {
            let (Some(first), Some(last)) = (member.first(), member.last()) else { continue };
            if member.len() > 1 && children.contains(first.as_str()) {
                let name = used_name(used, last);
                found.insert(name, first.clone());
            }
        }
    }
    found
}

/// `A as B` is known as `B`.
fn used_name(statement: &str, last: &str) -> String {
    let pattern = format!("{last} as ");
    match statement.split(&pattern).nth(1) {
        Some(alias) => alias.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect(),
        None => last.to_string(),
    }
}

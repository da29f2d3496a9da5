//! Pointers into the documentation stay true: every `docs/PAGE.md` (with `#anchor` or not) that a
//! source file, config, script, unit, test or Markdown file of the repository names is a page of
//! the book, and its anchor a heading of that page (MkDocs' slugs); a section of the README named
//! in quotes after the word (`README`, then a quoted name) is a heading README.md still has. The book's own links are checked by `mkdocs build --strict` in CI
//! (`.ci/run`), README.md's links into the book here.

use std::path::{Path, PathBuf};

use crate::support::repo_root;

/// Folders never scanned: build output, installed peers, version control.
const SKIPPED: &[&str] = &["target", ".peers", ".git", "node_modules"];

/// Text files a pointer may be written in.
const TEXT: &[&str] = &["rs", "toml", "md", "sh", "py", "txt", "service", "cfg", "yaml", "yml", "json", "mjs"];

#[test]
fn every_pointer_into_the_book_names_a_page_and_heading_that_exist() {
    let readme_headings = headings(&read("README.md"));
    let mut checked = 0;
    for file in repository_text_files() {
        let name = file.strip_prefix(repo_root()).unwrap_or(&file).display().to_string();
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for (page, anchor) in book_pointers(&text) {
            let path = repo_root().join("docs").join(&page);
            assert!(path.is_file(), "{name}: docs/{page} is no page of the book");
            if let Some(anchor) = anchor {
                let page_headings = headings(&std::fs::read_to_string(&path).unwrap_or_default());
                assert!(
                    page_headings.contains(&anchor),
                    "{name}: docs/{page} has no heading #{anchor}: {page_headings:?}"
                );
            }
            checked += 1;
        }
        for section in readme_sections(&text) {
            assert!(
                readme_headings.contains(&slug(&section)),
                "{name}: the section \"{section}\" named after the word README is no longer in README.md"
            );
        }
    }
    assert!(checked >= 10, "only {checked} pointers into the book found");
}

/// Every `docs/NAME.md` or `docs/NAME.md#ANCHOR` in `text` (NAME and ANCHOR as MkDocs writes them),
/// from the repository root: not a `docs/` deeper in a path (`file:///srv/docs/a.md`).
fn book_pointers(text: &str) -> Vec<(String, Option<String>)> {
    let slug_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_';
    let mut pointers = Vec::new();
    for (at, _) in text.match_indices("docs/") {
        let in_a_path = text[..at].chars().next_back().is_some_and(|c| c == '/' || c == '.' || slug_char(c));
        if in_a_path {
            continue;
        }
        let rest = &text[at + "docs/".len()..];
        let name_end = rest.find(|c: char| !slug_char(c)).unwrap_or(rest.len());
        let Some(after) = rest[name_end..].strip_prefix(".md") else { continue };
        if name_end == 0 {
            continue;
        }
        let anchor =
            after.strip_prefix('#').map(|a| a[..a.find(|c: char| !slug_char(c)).unwrap_or(a.len())].to_string());
        pointers.push((format!("{}.md", &rest[..name_end]), anchor.filter(|a| !a.is_empty())));
    }
    pointers
}

/// The sections named in quotes after `README` (or `README,`).
fn readme_sections(text: &str) -> Vec<String> {
    let mut sections = Vec::new();
    for opening in [concat!("README", " \""), concat!("README", ", \""), concat!("README", " \\\"")] {
        for (at, _) in text.match_indices(opening) {
            let rest = &text[at + opening.len()..];
            if let Some(end) = rest.find(['"', '\\']) {
                sections.push(rest[..end].to_string());
            }
        }
    }
    sections
}

/// The anchors of a Markdown file's headings (outside code blocks), as MkDocs makes them.
fn headings(markdown: &str) -> Vec<String> {
    let mut in_code = false;
    let mut anchors = Vec::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            anchors.push(slug(line.trim_start_matches('#')));
        }
    }
    anchors
}

/// MkDocs' default slug (Python-Markdown's `toc.slugify`) for ASCII text: characters other than
/// letters, digits, `_`, `-` and spaces dropped, lower case, runs of spaces and `-` one `-`.
fn slug(heading: &str) -> String {
    let kept: String = heading
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-' || c.is_whitespace())
        .collect::<String>()
        .trim()
        .to_lowercase();
    let mut slug = String::new();
    for c in kept.chars() {
        let c = if c.is_whitespace() { '-' } else { c };
        if !(c == '-' && slug.ends_with('-')) {
            slug.push(c);
        }
    }
    slug
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).expect(path)
}

/// Every text file of the repository outside [`SKIPPED`] folders (the Containerfile included).
fn repository_text_files() -> Vec<PathBuf> {
    let (mut files, mut dirs) = (Vec::new(), vec![repo_root()]);
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a repository folder").flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().to_string();
            if path.is_dir() {
                if !SKIPPED.contains(&name.as_str()) {
                    dirs.push(path);
                }
            } else if is_text(&path) {
                files.push(path);
            }
        }
    }
    files
}

fn is_text(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "Containerfile")
        || path.extension().and_then(|e| e.to_str()).is_some_and(|e| TEXT.contains(&e))
}

#[test]
fn slugs_are_mkdocs_slugs() {
    for (heading, slug_wanted) in [
        (" `[rate_limits]` and `[upstreams.rate_limits]`", "rate_limits-and-upstreamsrate_limits"),
        (" Resources as tools (`[bridge]`)", "resources-as-tools-bridge"),
        (" Protocol eras and what `auto` picks", "protocol-eras-and-what-auto-picks"),
        (" Matrix: every host era × upstream × hit/miss (issue 12)", "matrix-every-host-era-upstream-hitmiss-issue-12"),
    ] {
        assert_eq!(slug(heading), slug_wanted, "{heading}");
    }
}

//! The bypass corpus (`tests/data/bypass-corpus.txt`, see its header for the format), parsed into
//! sections. One parser for both users: the policy unit test (`src/policy/tests.rs`, which includes
//! this file by path) and the HTTP corpus test (`tests/fast/access/corpus.rs`). Plain std only.

/// One `[name]` section: its policy (the `#| ` lines), the URIs it must deny or refuse, and its
/// positive controls (`allowed: URI` or `allowed: URI -> file the read must return`).
pub struct CorpusSection {
    pub name: String,
    pub policy: String,
    pub denied: Vec<String>,
    pub allowed: Vec<(String, Option<String>)>,
}

/// Every section, the unnamed leading one as `default`.
pub fn bypass_corpus() -> Vec<CorpusSection> {
    let text = include_str!("../data/bypass-corpus.txt");
    let new = |name: &str| CorpusSection { name: name.into(), policy: String::new(), denied: vec![], allowed: vec![] };
    let mut sections = vec![new("default")];
    for line in text.lines() {
        let section = sections.last_mut().expect("one section");
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            sections.push(new(name));
        } else if let Some(toml) = line.strip_prefix("#| ") {
            section.policy.push_str(toml);
            section.policy.push('\n');
        } else if let Some(control) = line.strip_prefix("allowed: ") {
            let (uri, file) = match control.split_once(" -> ") {
                Some((uri, file)) => (uri, Some(file.to_string())),
                None => (control, None),
            };
            section.allowed.push((uri.to_string(), file));
        } else if !line.is_empty() && !line.starts_with('#') {
            section.denied.push(line.to_string());
        }
    }
    sections
}

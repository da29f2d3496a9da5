//! Reading policy files: every `*.toml` of the directory, parsed and checked (principals,
//! group names, globs compiled), every problem of every file reported at once.

use std::collections::BTreeMap;
use std::path::Path;

use figment::Figment;
use figment::providers::{Format, Toml};
use figment::value::Value;
use serde::Deserialize;

use super::identity::{GROUP_PREFIX, is_valid_group};
use super::is_valid_principal;
use super::rules::Rule;
use crate::problem::Problem;

/// One parsed, checked file.
pub(super) struct PolicyFile {
    pub name: String,
    pub principals: Vec<String>,
    pub allow: Vec<Rule>,
    pub deny: Vec<Rule>,
}

#[derive(Debug, Deserialize)]
struct RawPolicy {
    principals: Option<Vec<String>>,
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

/// `(file name, text)` of every `*.toml` file in `dir`, by name.
pub(super) fn read_dir(dir: &Path, problems: &mut Vec<Problem>) -> Vec<(String, String)> {
    let at = dir.display().to_string();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) => {
            problems.push(Problem { at, message: format!("cannot read the policies directory: {error}") });
            return Vec::new();
        }
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "toml") && e.path().is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    if names.is_empty() {
        let message = "no *.toml policy files: every request would be denied (remove [policies] dir to allow all)";
        problems.push(Problem { at, message: message.into() });
    }
    let mut files = Vec::new();
    for name in names {
        match std::fs::read_to_string(dir.join(&name)) {
            Ok(text) => files.push((name, text)),
            Err(error) => {
                problems.push(Problem { at: dir.join(&name).display().to_string(), message: error.to_string() })
            }
        }
    }
    files
}

pub(super) fn parse_file(dir: &Path, name: &str, text: &str, problems: &mut Vec<Problem>) -> Option<PolicyFile> {
    let at = dir.join(name).display().to_string();
    let raw: RawPolicy = match Figment::from(Toml::string(text)).extract() {
        Ok(raw) => raw,
        Err(errors) => {
            for error in errors {
                let key = error.path.join(".");
                let at = if key.is_empty() { at.clone() } else { format!("{at}: {key}") };
                problems.push(Problem { at, message: error.kind.to_string() });
            }
            return None;
        }
    };
    let before = problems.len();
    for key in raw.unknown.keys() {
        problems.push(Problem { at: format!("{at}: {key}"), message: "unknown key".into() });
    }
    let principals = check_principals(&at, raw.principals, problems);
    let compile = |list: &str, patterns: Vec<String>, problems: &mut Vec<Problem>| -> Vec<Rule> {
        let mut rules = Vec::new();
        for (index, pattern) in patterns.into_iter().enumerate() {
            match Rule::new(name, &pattern, list == "deny") {
                Ok(rule) => rules.push(rule),
                Err(message) => problems.push(Problem { at: format!("{at}: {list}[{index}]"), message }),
            }
        }
        rules
    };
    let allow = compile("allow", raw.allow, problems);
    let deny = compile("deny", raw.deny, problems);
    (problems.len() == before).then(|| PolicyFile { name: name.to_string(), principals, allow, deny })
}

fn check_principals(at: &str, principals: Option<Vec<String>>, problems: &mut Vec<Problem>) -> Vec<String> {
    let Some(principals) = principals else {
        problems.push(Problem { at: at.to_string(), message: "missing `principals`".into() });
        return Vec::new();
    };
    if principals.is_empty() {
        problems.push(Problem { at: format!("{at}: principals"), message: "names no principal".into() });
    }
    for principal in &principals {
        let message = match principal.strip_prefix(GROUP_PREFIX) {
            Some(group) if !is_valid_group(group) => {
                format!("`{principal}`: `{group}` is not a group name (non-empty, no spaces, `,` or glob characters)")
            }
            Some(_) => continue,
            None if !is_valid_principal(principal) && principal != "*" => {
                format!("`{principal}` is not a principal name (non-empty, no spaces, no `*` inside, not `group:…`)")
            }
            None => continue,
        };
        problems.push(Problem { at: format!("{at}: principals"), message });
    }
    principals
}

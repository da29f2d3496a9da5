//! Host variables → the proxy's `${VAR}` references (read from the proxy's environment at
//! start): VS Code `${input:id}` → `${ID}`, `${env:X}` → `${X}`, `${userHome}` → `${HOME}`,
//! `${workspaceFolder}` → the workspace's path; `${X}` already is one. Anything else (a name
//! that is not `[A-Za-z_][A-Za-z0-9_]*`, a workspace path holding `${`) is a problem naming it.

use std::convert::Infallible;

use serde_json::Value;

use super::state::{Inputs, State};
use crate::config::is_variable_name;

/// The `inputs` array of a VS Code file (entries without an `id` are left out).
pub(super) fn inputs(value: Option<&Value>) -> Inputs {
    let Some(Value::Array(items)) = value else { return Inputs::new() };
    items
        .iter()
        .filter_map(|item| {
            let id = item.get("id")?.as_str()?.to_string();
            let description = item.get("description").and_then(Value::as_str).unwrap_or_default().to_string();
            Some((id, description))
        })
        .collect()
}

/// `text` with every host variable replaced; each proxy variable it now needs is recorded.
pub(super) fn map(state: &mut State<'_>, at: &str, text: &str) -> String {
    let mapped = crate::config::replace_vars(text, |inner| Ok::<_, Infallible>(replace(state, at, inner)));
    mapped.unwrap_or_else(|never| match never {})
}

/// What `${inner}` becomes.
fn replace(state: &mut State<'_>, at: &str, inner: &str) -> String {
    if let Some(id) = inner.strip_prefix("input:") {
        let variable = variable_name(id);
        let description = state.inputs.get(id).cloned();
        let entry = state.current.clone();
        let message = match description.as_deref() {
            Some("") | None => format!("input `{id}` is read from `{variable}` in the proxy's environment"),
            Some(text) => format!("input `{id}` ({text}) is read from `{variable}` in the proxy's environment"),
        };
        state.note(&entry, &message);
        return reference(&variable);
    }
    if let Some(name) = inner.strip_prefix("env:") {
        if !is_variable_name(name) {
            state.problem(at, &format!("`${{{inner}}}`: `{name}` is not a variable name like API_KEY"));
            return String::new();
        }
        return reference(name);
    }
    match inner {
        "userHome" => reference("HOME"),
        "workspaceFolder" | "workspaceRoot" => match &state.origin.workspace {
            Some(folder) if folder.display().to_string().contains("${") => {
                let message = format!(
                    "`${{{inner}}}`: the workspace folder's path holds `${{`, which the proxy would read as a variable"
                );
                state.problem(at, &message);
                String::new()
            }
            Some(folder) => folder.display().to_string(),
            None => {
                state.problem(at, &format!("`${{{inner}}}`: the workspace folder is not known"));
                String::new()
            }
        },
        name if is_variable_name(name) => reference(name),
        other => {
            let message = format!("`${{{other}}}` is not a variable the proxy can supply");
            state.problem(at, &message);
            String::new()
        }
    }
}

/// `${name}` (the import lists the variables its written references need).
pub(super) fn reference(name: &str) -> String {
    format!("${{{name}}}")
}

/// An environment variable name made from free text: upper case, `_` for anything else.
pub(super) fn variable_name(text: &str) -> String {
    let mut name: String =
        text.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

//! The cluster's secrets: the [`Secret`] type that never shows its value, the cluster secret read
//! from the variable `secret_env` names or the file `secret_file` names (at least
//! [`MIN_SECRET_BYTES`]), and a variable's value for a secret (never one of the settings'
//! `MCP_PROXY_…` variables).

use std::fmt;
use std::path::Path;

use crate::config::{Problem, expand_vars, push};

/// The shortest cluster secret accepted (bytes): every replica derives its keys from it.
pub const MIN_SECRET_BYTES: usize = 32;

/// Environment variables with this prefix are read as settings by the config loader, so a
/// secret cannot live in one.
const SETTINGS_PREFIX: &str = "MCP_PROXY_";

/// A value that must not be shown: `Debug` prints `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself, for the one place that uses it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// The cluster secret, from `secret_env`'s variable or `secret_file`'s file (one of the two).
pub(super) fn cluster_secret(
    secret_env: Option<String>,
    secret_file: Option<String>,
    base: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) -> String {
    match (secret_env, secret_file) {
        (Some(_), Some(_)) => {
            push(problems, "cluster.secret_file", "give `secret_env` or `secret_file`, not both".into());
            String::new()
        }
        (None, Some(file)) => secret_from_file(&file, base, lookup, problems),
        (name, None) => secret_from_env(name, lookup, problems),
    }
}

fn secret_from_env(
    name: Option<String>,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) -> String {
    let Some(name) = name else {
        let message = "missing: the name of the variable holding the cluster secret (or `secret_file`)";
        push(problems, "cluster.secret_env", message.into());
        return String::new();
    };
    let value = env_value("cluster.secret_env", &name, lookup, problems).unwrap_or_default();
    long_enough("cluster.secret_env", &format!("`{name}`"), &value, problems);
    value
}

/// The secret in the file `raw` names (`${VAR}`s expanded, relative to the config's folder),
/// without the line ending a file's last line has. What the file holds is never shown.
fn secret_from_file(
    raw: &str,
    base: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) -> String {
    let at = "cluster.secret_file";
    let path = match expand_vars(raw, lookup) {
        Ok(path) => base.join(path),
        Err(name) => {
            push(problems, at, format!("`{raw}`: environment variable `{name}` is not set"));
            return String::new();
        }
    };
    let value = match std::fs::read_to_string(&path) {
        Ok(text) => text.strip_suffix('\n').map(|t| t.strip_suffix('\r').unwrap_or(t)).unwrap_or(&text).to_string(),
        Err(error) => {
            push(problems, at, format!("{}: cannot be read ({})", path.display(), error.kind()));
            return String::new();
        }
    };
    if value.is_empty() {
        push(problems, at, format!("{} is empty", path.display()));
    }
    long_enough(at, &path.display().to_string(), &value, problems);
    value
}

/// A problem at `at` when a non-empty secret from `source` is shorter than the shortest accepted.
fn long_enough(at: &str, source: &str, value: &str, problems: &mut Vec<Problem>) {
    if !value.is_empty() && value.len() < MIN_SECRET_BYTES {
        let message =
            format!("{source} holds {} bytes; the cluster secret needs at least {MIN_SECRET_BYTES}", value.len());
        push(problems, at, message);
    }
}

/// The value of the variable `name`, which must be set, non-empty, and not a settings variable.
pub(super) fn env_value(
    at: &str,
    name: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) -> Option<String> {
    if name.to_ascii_uppercase().starts_with(SETTINGS_PREFIX) {
        push(
            problems,
            at,
            format!("`{name}`: variables named {SETTINGS_PREFIX}… are read as settings; name it otherwise"),
        );
        return None;
    }
    match lookup(name) {
        Some(value) if !value.is_empty() => Some(value),
        Some(_) => {
            push(problems, at, format!("`{name}` is empty"));
            None
        }
        None => {
            push(problems, at, format!("`{name}` is not set"));
            None
        }
    }
}

//! One server entry → one upstream: its transport from `type` / `command` / `url`, its strings
//! through the variable mapping and the secret check, its name made valid and unique.

use serde_json::{Map, Value};

use super::state::State;
use super::{ImportedTransport, ImportedUpstream, secrets, vars};
use crate::config::is_variable_name;
use crate::namespace::is_valid_upstream_name;

/// Keys hosts use that the proxy has no equivalent for: noted, not a problem.
const IGNORED_KEYS: &[&str] =
    &["description", "autoApprove", "alwaysAllow", "disabledTools", "timeout", "gallery", "version", "envFile", "dev"];

/// The transport an entry asks for.
enum Kind {
    Stdio,
    Http,
}

impl<'a> State<'a> {
    /// Import the entry `entry` (at `at` in the file).
    pub(super) fn entry(&mut self, at: &str, entry: &str, value: &Value) {
        self.current = entry.to_string();
        let Some(fields) = value.as_object() else {
            return self.problem(at, "not an object with `command` or `url`");
        };
        if fields.get("disabled").and_then(Value::as_bool) == Some(true) {
            return self.note(entry, "skipped: it is disabled (`\"disabled\": true`)");
        }
        let Some(kind) = self.kind(at, entry, fields) else { return };
        for key in fields.keys().filter(|key| !known_key(key)) {
            self.note(entry, &format!("`{key}` is not a server setting the proxy knows; left out"));
        }
        for key in fields.keys().filter(|key| IGNORED_KEYS.contains(&key.as_str())) {
            self.note(entry, &format!("`{key}` has no equivalent in the proxy; left out"));
        }
        let name = self.name_for(entry);
        let before = self.problems.len();
        let transport = match kind {
            Kind::Stdio => self.command(at, entry, &name, fields),
            Kind::Http => self.http(at, entry, &name, fields),
        };
        if self.problems.len() == before {
            self.upstreams.push(ImportedUpstream { name, entry: entry.to_string(), transport, sandbox: None });
        }
    }

    /// stdio or HTTP, from `type` or else from which of `command` and `url` is there.
    fn kind(&mut self, at: &str, entry: &str, fields: &Map<String, Value>) -> Option<Kind> {
        let url = fields.get("url").or_else(|| fields.get("serverUrl"));
        let declared = match fields.get("type").or_else(|| fields.get("transport")) {
            None => None,
            Some(Value::String(kind)) => Some(kind.to_ascii_lowercase()),
            Some(_) => {
                self.problem(&format!("{at}.type"), "not a string");
                return None;
            }
        };
        let kind = match (declared.as_deref(), fields.contains_key("command"), url.is_some()) {
            (Some("stdio"), _, _) | (None, true, false) => Kind::Stdio,
            (Some("http" | "streamable-http" | "streamablehttp" | "streamable_http"), _, _) | (None, false, true) => {
                Kind::Http
            }
            (Some("sse"), _, _) => {
                let message = "skipped: transport `sse` (the 2024 HTTP+SSE transport) is not one the proxy \
                               speaks; if the server also serves streamable HTTP, add it with that URL";
                self.note(entry, message);
                return None;
            }
            (Some(other), _, _) => {
                let message = format!("unknown transport `{other}` (expected stdio, http, streamable-http or sse)");
                self.problem(&format!("{at}.type"), &message);
                return None;
            }
            (None, true, true) => {
                self.problem(at, "has both `command` and `url`: say which with `type`");
                return None;
            }
            (None, false, false) => {
                self.problem(at, "needs `command` (a stdio server) or `url` (an HTTP server)");
                return None;
            }
        };
        Some(kind)
    }

    fn command(&mut self, at: &str, entry: &str, name: &str, fields: &Map<String, Value>) -> ImportedTransport {
        let command = match fields.get("command") {
            Some(Value::String(command)) if !command.trim().is_empty() => self.text(&format!("{at}.command"), command),
            Some(_) => {
                self.problem(&format!("{at}.command"), "not a non-empty string");
                String::new()
            }
            None => {
                self.problem(&format!("{at}.command"), "missing: a stdio server needs the program to start");
                String::new()
            }
        };
        let args = self.strings(&format!("{at}.args"), fields.get("args"));
        let args = args.iter().map(|arg| self.text(&format!("{at}.args"), arg)).collect();
        let args = secrets::args(self, entry, name, args);
        let env = self.pairs(&format!("{at}.env"), fields.get("env"));
        for (key, _) in env.iter().filter(|(key, _)| !is_variable_name(key)) {
            self.problem(&format!("{at}.env.{key}"), "not a variable name like API_KEY");
        }
        let env = secrets::env(self, entry, name, env);
        let cwd = match fields.get("cwd") {
            None => None,
            Some(Value::String(cwd)) => {
                if !std::path::Path::new(cwd).is_absolute() && !cwd.starts_with("${") {
                    self.note(entry, "`cwd` is relative: the proxy takes it relative to the config file");
                }
                Some(self.path(&format!("{at}.cwd"), cwd))
            }
            Some(_) => {
                self.problem(&format!("{at}.cwd"), "not a string");
                None
            }
        };
        ImportedTransport::Command { command, args, env, cwd }
    }

    fn http(&mut self, at: &str, entry: &str, name: &str, fields: &Map<String, Value>) -> ImportedTransport {
        let url = match fields.get("url").or_else(|| fields.get("serverUrl")) {
            Some(Value::String(url)) => self.text(&format!("{at}.url"), url),
            Some(_) => {
                self.problem(&format!("{at}.url"), "not a string");
                String::new()
            }
            None => {
                self.problem(&format!("{at}.url"), "missing: an HTTP server needs its URL");
                String::new()
            }
        };
        let http = url.starts_with("http://") || url.starts_with("https://");
        if !url.is_empty() && !http {
            self.problem(&format!("{at}.url"), "not an http:// or https:// URL");
        }
        if fields.get("type").is_none() && url.split(['?', '#']).next().is_some_and(|path| path.ends_with("/sse")) {
            let message = "its URL ends in `/sse`: taken as streamable HTTP; a server that speaks only the 2024 \
                           HTTP+SSE transport stays down (its `/status` says why)";
            self.note(entry, message);
        }
        let url = secrets::url(self, entry, name, url);
        let headers = self.pairs(&format!("{at}.headers"), fields.get("headers"));
        let headers = secrets::headers(self, entry, name, headers);
        ImportedTransport::Http { url, headers }
    }

    /// A string with the host's variables mapped to the proxy's `${VAR}` references.
    fn text(&mut self, at: &str, text: &str) -> String {
        vars::map(self, at, text)
    }

    /// A path: mapped like text, but the proxy reads no `${VAR}` in it.
    fn path(&mut self, at: &str, text: &str) -> String {
        let mapped = self.text(at, text);
        if mapped.contains("${") {
            self.problem(at, "a variable in `cwd` is not supported (the proxy takes the folder as written)");
        }
        mapped
    }

    fn strings(&mut self, at: &str, value: Option<&Value>) -> Vec<String> {
        match value {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .filter_map(|(index, item)| match scalar(item) {
                    Some(text) => Some(text),
                    None => {
                        self.problem(&format!("{at}[{index}]"), "not a string");
                        None
                    }
                })
                .collect(),
            Some(_) => {
                self.problem(at, "not an array of strings");
                Vec::new()
            }
        }
    }

    /// An object of strings (`env`, `headers`), values mapped.
    fn pairs(&mut self, at: &str, value: Option<&Value>) -> Vec<(String, String)> {
        match value {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(fields)) => fields
                .iter()
                .filter_map(|(key, value)| match scalar(value) {
                    Some(text) => Some((key.clone(), self.text(&format!("{at}.{key}"), &text))),
                    None => {
                        self.problem(&format!("{at}.{key}"), "not a string");
                        None
                    }
                })
                .collect(),
            Some(_) => {
                self.problem(at, "not an object of strings");
                Vec::new()
            }
        }
    }

    /// A valid, unused upstream name for `entry`; a rename is noted.
    fn name_for(&mut self, entry: &str) -> String {
        let base = valid_name(entry);
        let mut name = base.clone();
        let mut number = 2;
        while !self.names.insert(name.clone()) {
            name = format!("{base}-{number}");
            number += 1;
        }
        if name != entry {
            let message = format!(
                "renamed to `{name}` (upstream names are lower-case letters, digits and inner `-`, and unique)"
            );
            self.note(entry, &message);
        }
        name
    }
}

/// `entry` as an upstream name: lower case, every other character a `-`, runs of `-` as one, no
/// `-` at either end; `server` when nothing is left.
pub(super) fn valid_name(entry: &str) -> String {
    let mut name = String::new();
    for c in entry.chars().flat_map(char::to_lowercase) {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() { c } else { '-' };
        if !(c == '-' && (name.is_empty() || name.ends_with('-'))) {
            name.push(c);
        }
    }
    let name = name.trim_end_matches('-').to_string();
    if is_valid_upstream_name(&name) { name } else { "server".to_string() }
}

/// A string, or a number or boolean written as one (hosts accept `"PORT": 3000`).
fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

fn known_key(key: &str) -> bool {
    ["type", "transport", "command", "args", "env", "cwd", "url", "serverUrl", "headers", "disabled"].contains(&key)
        || IGNORED_KEYS.contains(&key)
}

//! The imported upstreams written as a config file: a header naming the source and the
//! variables to set, then one `[[upstreams]]` table per server (every other setting at the
//! shipped defaults).

use std::fmt::Write;

use super::{Import, ImportedTransport, ImportedUpstream};

pub(super) fn config(import: &Import, source: &str) -> String {
    let mut out = format!("# Imported from {source} by `mcp-resource-proxy import`.\n");
    out.push_str("# Every setting not written here is at its default (README \"Configuration\").\n");
    if !import.variables.is_empty() {
        let names: Vec<&str> = import.variables.iter().map(String::as_str).collect();
        let _ = writeln!(out, "# Set in the proxy's environment before `check` or `serve`: {}.", names.join(", "));
    }
    for upstream in &import.upstreams {
        out.push('\n');
        upstream_table(&mut out, upstream);
    }
    out
}

fn upstream_table(out: &mut String, upstream: &ImportedUpstream) {
    out.push_str("[[upstreams]]\n");
    if upstream.name != upstream.entry {
        let _ = writeln!(out, "# `{}` in the servers file", upstream.entry.replace('\n', " "));
    }
    let _ = writeln!(out, "name = {}", string(&upstream.name));
    match &upstream.transport {
        ImportedTransport::Command { command, args, env, cwd } => {
            let _ = writeln!(out, "command = {}", string(command));
            if !args.is_empty() {
                let args: Vec<String> = args.iter().map(|arg| string(arg)).collect();
                let _ = writeln!(out, "args = [{}]", args.join(", "));
            }
            if !env.is_empty() {
                let _ = writeln!(out, "env = {}", inline_table(env));
            }
            if let Some(cwd) = cwd {
                let _ = writeln!(out, "cwd = {}", string(cwd));
            }
        }
        ImportedTransport::Http { url, headers } => {
            let _ = writeln!(out, "url = {}", string(url));
            if !headers.is_empty() {
                let _ = writeln!(out, "headers = {}", inline_table(headers));
            }
        }
    }
}

fn inline_table(pairs: &[(String, String)]) -> String {
    let pairs: Vec<String> = pairs.iter().map(|(key, value)| format!("{} = {}", string(key), string(value))).collect();
    format!("{{ {} }}", pairs.join(", "))
}

/// A TOML basic string.
pub(super) fn string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

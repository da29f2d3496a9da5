//! The imported upstreams written as a config file, through `toml_edit`: a header, then one
//! `[[upstreams]]` table per server (every other setting at the shipped defaults), with its
//! `[upstreams.sandbox]` where `import` derived one.
//!
//! Invariant: every key and value is written by the TOML library (quoted and escaped by
//! construction), so the text parses back to exactly `[[upstreams]]` of the imported values; a
//! comment is fixed text only, never anything of the servers file or its path (a TOML library
//! writes comment text as given).

use toml_edit::{Array, ArrayOfTables, DocumentMut, InlineTable, Item, Table, value};

use super::{Import, ImportedTransport, ImportedUpstream, SuggestedProfile};

/// The file's first lines: fixed text (the variables to set are on `import`'s stderr and in the
/// `${VAR}` references themselves).
const HEADER: &str = "\
# Imported by `mcp-resource-proxy import` from a host's servers file.
# Every setting not written here is at its default (docs/configuration.md).
# Each `${VAR}` below is read from the proxy's environment: set it before `check` or `serve`.
";

/// Above a derived `[upstreams.sandbox]`: fixed text.
const SANDBOX_COMMENT: &str = "\
# Derived by `import` from the entry: its folder arguments writable, its file arguments
# readable, the network on. Narrow it (or remove it) as the server needs: docs/sandbox.md.
";

pub(super) fn config(import: &Import) -> String {
    let mut document = DocumentMut::new();
    document.decor_mut().set_prefix(HEADER);
    let upstreams: ArrayOfTables = import.upstreams.iter().map(upstream_table).collect();
    document.insert("upstreams", Item::ArrayOfTables(upstreams));
    document.to_string()
}

fn upstream_table(upstream: &ImportedUpstream) -> Table {
    let mut table = Table::new();
    table.decor_mut().set_prefix("\n");
    table.insert("name", value(upstream.name.as_str()));
    match &upstream.transport {
        ImportedTransport::Command { command, args, env, cwd } => {
            table.insert("command", value(command.as_str()));
            if !args.is_empty() {
                table.insert("args", value(args.iter().map(String::as_str).collect::<Array>()));
            }
            if !env.is_empty() {
                table.insert("env", value(inline_table(env)));
            }
            if let Some(cwd) = cwd {
                table.insert("cwd", value(cwd.as_str()));
            }
            if let Some(profile) = &upstream.sandbox {
                table.insert("sandbox", Item::Table(sandbox_table(profile)));
            }
        }
        ImportedTransport::Http { url, headers } => {
            table.insert("url", value(url.as_str()));
            if !headers.is_empty() {
                table.insert("headers", value(inline_table(headers)));
            }
        }
    }
    table
}

/// `[upstreams.sandbox]`, under a fixed comment.
fn sandbox_table(profile: &SuggestedProfile) -> Table {
    let strings = |items: &[String]| value(items.iter().map(String::as_str).collect::<Array>());
    let mut table = Table::new();
    table.decor_mut().set_prefix(SANDBOX_COMMENT);
    table.insert("read", strings(&profile.read));
    table.insert("write", strings(&profile.write));
    table.insert("network", value(profile.network));
    table.insert("keep_env", strings(&profile.keep_env));
    table
}

fn inline_table(pairs: &[(String, String)]) -> InlineTable {
    let mut table: InlineTable = pairs.iter().map(|(key, text)| (key.as_str(), text.as_str())).collect();
    table.fmt();
    table
}

//! `mcpServers` files as proxy upstreams: the JSON hosts are configured with (Claude Desktop and
//! Cursor `{"mcpServers": {…}}`, VS Code `.vscode/mcp.json` `{"servers": {…}, "inputs": […]}`)
//! turned into `[[upstreams]]` entries and written out as TOML (`import`), or loaded directly
//! (`serve --mcp-json`). Pure but for [`load_config`], which reads the file, and [`Host::real`]: text in,
//! entries and notes out.
//!
//! Invariant: no secret is written in clear. A literal secret-looking value (an `env` value,
//! header or argument whose name or shape says secret, a password or key in a URL, an argument
//! or a connection string) becomes a `${VAR}` reference, and the note names the variable; host
//! variables (`${input:x}`, `${env:X}`, `${userHome}`) become the proxy's `${VAR}` references,
//! and a `${env:X}` whose `X` is no variable name is a problem. Every change made to an entry (a
//! rename, a moved secret, a key with no equivalent, an entry skipped) is a [`Note`]; every
//! entry that cannot be read is a [`Problem`] naming it, all of them at once; notes and problems
//! show control characters as escapes.
//!
//! `import` also derives a sandbox profile per stdio server (`profile`): written where the
//! entry shows all it needs, else suggested in a note; `serve --mcp-json` serves without one.
//!
//! Invariant: the written config is made by a TOML library (`toml_out`): the file's text is only
//! ever a key or value of an `[[upstreams]]` table, never a line, a table or a comment.

mod entry;
mod profile;
mod secrets;
mod state;
mod toml_out;
mod vars;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::config::{CliOverrides, Config, ConfigError};
use crate::problem::Problem;

pub use self::profile::{Host, PathKind, SuggestedProfile};

/// What the import made of a file.
#[derive(Debug, Clone, PartialEq)]
pub struct Import {
    /// The upstreams, in the file's order of names (sorted).
    pub upstreams: Vec<ImportedUpstream>,
    /// What was changed or left out, per entry.
    pub notes: Vec<Note>,
    /// The variables the proxy's environment must set (the `${VAR}` references written).
    pub variables: BTreeSet<String>,
    /// The literal secrets moved out of the file, by the variable that stands for each: what
    /// `serve --mcp-json` supplies in memory; never written or shown.
    pub secrets: MovedSecrets,
}

/// Variable → the literal secret of the file it stands for. Its `Debug` shows the names only.
#[derive(Clone, Default, PartialEq)]
pub struct MovedSecrets(BTreeMap<String, String>);

impl MovedSecrets {
    /// The secret the variable `name` stands for, if the import moved one there.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// Every secret value (to keep them out of what is shown).
    pub fn values(&self) -> impl Iterator<Item = &str> {
        self.0.values().map(String::as_str)
    }
}

impl std::fmt::Debug for MovedSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// One upstream as imported.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedUpstream {
    /// A valid upstream name (`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`), unique in the import.
    pub name: String,
    /// The entry's name in the file.
    pub entry: String,
    pub transport: ImportedTransport,
    /// The sandbox profile written active for it (`import` only: [`Import::suggest_sandboxes`]).
    pub sandbox: Option<SuggestedProfile>,
}

/// How the imported upstream is reached (the transports the proxy speaks).
#[derive(Debug, Clone, PartialEq)]
pub enum ImportedTransport {
    Command { command: String, args: Vec<String>, env: Vec<(String, String)>, cwd: Option<String> },
    Http { url: String, headers: Vec<(String, String)> },
}

/// A change made to an entry, or an entry left out, in plain words.
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    /// The entry's name in the file.
    pub entry: String,
    pub message: String,
    /// The note says a literal secret was moved to a variable (`serve --mcp-json` supplies it
    /// from the file instead).
    pub moved_secret: bool,
}

/// Where the file is, for `${workspaceFolder}`: the folder holding `.vscode/` or `.cursor/`.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    pub workspace: Option<PathBuf>,
}

impl Origin {
    /// The workspace of a file at `path`: the parent of its `.vscode`/`.cursor` folder, or its
    /// own folder (made absolute from the current directory).
    pub fn of_file(path: &std::path::Path) -> Origin {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let dir = path.parent().map(std::path::Path::to_path_buf);
        let workspace = dir.map(|dir| match dir.file_name().and_then(|n| n.to_str()) {
            Some(".vscode" | ".cursor") => dir.parent().map(std::path::Path::to_path_buf).unwrap_or(dir),
            _ => dir,
        });
        Origin { workspace }
    }
}

/// Every problem of a file that cannot be imported.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", render_problems(.problems))]
pub struct ImportError {
    pub problems: Vec<Problem>,
    /// What was noted of the other entries meanwhile.
    pub notes: Vec<Note>,
}

/// Read an `mcpServers` / `servers` file.
pub fn import(text: &str, origin: &Origin) -> Result<Import, ImportError> {
    let root: Value = serde_json::from_str(text).map_err(|e| ImportError::one(format!("not JSON: {e}")))?;
    let Some(root) = root.as_object() else {
        return Err(ImportError::one("not a JSON object".into()));
    };
    let (key, servers) = servers_of(root).ok_or_else(|| {
        ImportError::one("no `mcpServers` (Claude Desktop, Cursor) or `servers` (VS Code) object of servers".into())
    })?;
    let inputs = vars::inputs(root.get("inputs").or_else(|| root.get("mcp").and_then(|m| m.get("inputs"))));
    let mut state = state::State::new(origin, inputs);
    for (name, value) in servers {
        state.entry(&format!("{key}.{name}"), name, value);
    }
    state.finish()
}

impl ImportError {
    /// One problem with the file as a whole.
    fn one(message: String) -> ImportError {
        ImportError { problems: vec![Problem::new("file", message)], notes: Vec::new() }
    }
}

impl Import {
    /// The imported upstreams as a config file (written by a TOML library: nothing of the
    /// servers file is written but as a key or value of its `[[upstreams]]`).
    pub fn to_toml(&self) -> String {
        toml_out::config(self)
    }
}

/// The configuration `serve --mcp-json PATH` serves: the file's servers as upstreams, every
/// other setting at its default (the environment and `cli` apply as with a config file;
/// a `policies` folder beside the file is used). The file is served as it is: a literal secret
/// the import moved to a `${VAR}` is supplied from the file, in memory (the environment's `VAR`
/// does not replace it), and nothing is written. The notes say what the import changed (a moved
/// secret is not among them: nothing has to be set).
pub fn load_config(path: &std::path::Path, cli: &CliOverrides) -> Result<(Config, Vec<Note>), ConfigError> {
    let at = printable(&path.display().to_string());
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError { problems: vec![Problem::new(at.clone(), format!("cannot read: {e}"))] })?;
    let imported = import(&text, &Origin::of_file(path)).map_err(|e| ConfigError {
        problems: e.problems.into_iter().map(|p| Problem::new(format!("{at}: {}", p.at), p.message)).collect(),
    })?;
    let base = path.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
    let secrets = &imported.secrets;
    let lookup = |name: &str| secrets.get(name).map(str::to_string).or_else(|| std::env::var(name).ok());
    let config = Config::load_text(&imported.to_toml(), &base, cli, &lookup)?;
    let notes = imported.notes.into_iter().filter(|note| !note.moved_secret).collect();
    Ok((config, notes))
}

/// `text` with its control characters (a newline, an escape) written as escapes (`\n`,
/// `\u{1b}`): what the import says of a file is one line per note or problem, whatever the file
/// (or its path) holds.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c.is_control() {
            true => out.extend(c.escape_default()),
            false => out.push(c),
        }
    }
    out
}

/// `mcpServers`, `servers`, or VS Code settings' `mcp.servers`.
fn servers_of(root: &Map<String, Value>) -> Option<(&'static str, &Map<String, Value>)> {
    if let Some(servers) = root.get("mcpServers").and_then(Value::as_object) {
        return Some(("mcpServers", servers));
    }
    if let Some(servers) = root.get("servers").and_then(Value::as_object) {
        return Some(("servers", servers));
    }
    root.get("mcp").and_then(|m| m.get("servers")).and_then(Value::as_object).map(|s| ("mcp.servers", s))
}

fn render_problems(problems: &[Problem]) -> String {
    let count = problems.len();
    let mut text = format!("{count} problem{} in the servers file:\n", if count == 1 { "" } else { "s" });
    for problem in problems {
        text.push_str(&format!("  - {problem}\n"));
    }
    text
}

#[cfg(test)]
mod tests;

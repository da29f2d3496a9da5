//! `connect HOST`: a host's MCP config file made to use the proxy. The proxy's entry is written
//! into the file's servers (`mcpServers` for Claude Desktop and Cursor, `servers` for VS Code);
//! every other server and key is kept (keys come back sorted: the file is rewritten by
//! `serde_json`, two-space indented). The change is shown on stderr first.
//!
//! Invariant: the file as it was is kept, byte for byte, in `FILE.mcp-resource-proxy.bak` (a
//! file that did not exist is marked by `FILE.mcp-resource-proxy.created`) before anything is
//! written; an older backup is never replaced (it holds the file from before the first
//! `connect`; saying so), and `--undo` puts it back and removes it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::config::is_variable_name;
use crate::mcp_json::printable;
use clap::ValueEnum;
use serde_json::{Map, Value, json};

use super::EXIT_CONFIG;

/// A host whose config file `connect` writes.
#[derive(Clone, Copy, PartialEq, ValueEnum)]
pub(crate) enum Host {
    ClaudeDesktop,
    Cursor,
    Vscode,
}

/// What `connect` is asked to do.
pub(crate) struct Request {
    pub host: Host,
    pub file: Option<PathBuf>,
    pub name: String,
    pub config: PathBuf,
    /// Connect over streamable HTTP at this URL instead of stdio.
    pub http: Option<String>,
    /// With `http`: the variable holding the bearer token the host sends.
    pub token_env: Option<String>,
    pub dry_run: bool,
    pub undo: bool,
}

/// `connect HOST [--file PATH] [--name NAME] [--http URL [--token-env VAR]] [--dry-run] [--undo]`.
pub(crate) fn connect(request: &Request) -> ExitCode {
    let file = match request.file.clone().map_or_else(|| default_file(request.host), Ok) {
        Ok(file) => file,
        Err(error) => return fail(&error),
    };
    let done = if request.undo { undo(&file, request.dry_run) } else { write(&file, request) };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(&error),
    }
}

/// The host's usual config file: Claude Desktop's in the user's config folder (macOS:
/// `~/Library/Application Support/Claude/`), Cursor's `~/.cursor/mcp.json`, VS Code's
/// `.vscode/mcp.json` of the current folder.
fn default_file(host: Host) -> Result<PathBuf, String> {
    let home = || std::env::var_os("HOME").map(PathBuf::from).ok_or("HOME is not set: name the file with --file");
    Ok(match host {
        Host::ClaudeDesktop if cfg!(target_os = "macos") => {
            home()?.join("Library/Application Support/Claude/claude_desktop_config.json")
        }
        Host::ClaudeDesktop => home()?.join(".config/Claude/claude_desktop_config.json"),
        Host::Cursor => home()?.join(".cursor/mcp.json"),
        Host::Vscode => PathBuf::from(".vscode/mcp.json"),
    })
}

fn fail(error: &str) -> ExitCode {
    eprintln!("{error}");
    ExitCode::from(EXIT_CONFIG)
}

/// Where the file as it was is kept.
fn backup_of(file: &Path) -> PathBuf {
    sibling(file, ".mcp-resource-proxy.bak")
}

/// The mark that `connect` created the file.
fn created_mark_of(file: &Path) -> PathBuf {
    sibling(file, ".mcp-resource-proxy.created")
}

fn sibling(file: &Path, suffix: &str) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn shown(path: &Path) -> String {
    printable(&path.display().to_string())
}

/// Merge the proxy's entry into `file` (after keeping a backup), or with `dry_run` only show it.
fn write(file: &Path, request: &Request) -> Result<(), String> {
    let before = match std::fs::read(file) {
        Ok(bytes) => Some(bytes),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(error) => return Err(format!("{}: cannot read: {error}", shown(file))),
    };
    let root = match &before {
        Some(bytes) => serde_json::from_slice::<Value>(bytes)
            .map_err(|e| format!("{}: not JSON ({e}): nothing written", shown(file)))?,
        None => json!({}),
    };
    if request.name.trim().is_empty() {
        return Err("--name is empty: name the server".into());
    }
    let entry = entry(request)?;
    let (after, previous) = merged(root, request.host, &request.name, entry.clone())
        .map_err(|e| format!("{}: {e}: nothing written", shown(file)))?;
    show_change(file, &request.name, previous.as_ref(), &entry, before.is_none());
    if request.dry_run {
        eprintln!("dry run: nothing written");
        return Ok(());
    }
    if let Some(folder) = file.parent().filter(|folder| !folder.as_os_str().is_empty()) {
        std::fs::create_dir_all(folder).map_err(|e| format!("cannot create {}: {e}", shown(folder)))?;
    }
    keep_backup(file, before.as_deref())?;
    let mut text = serde_json::to_string_pretty(&after).expect("a JSON value serialises");
    text.push('\n');
    std::fs::write(file, text).map_err(|e| format!("cannot write {}: {e}", shown(file)))?;
    eprintln!("{}: written; `connect --undo` puts the file back as it was", shown(file));
    Ok(())
}

/// The proxy's entry: stdio (`serve --stdio --config <absolute path>`), or streamable HTTP with
/// `Authorization: Bearer ${env:VAR}` (Cursor and VS Code read `${env:…}` in headers).
fn entry(request: &Request) -> Result<Value, String> {
    let Some(url) = &request.http else {
        let program = std::env::current_exe().map_err(|e| format!("cannot tell this program's path: {e}"))?;
        let config = std::path::absolute(&request.config).unwrap_or_else(|_| request.config.clone());
        if !config.is_file() {
            eprintln!("note: {} does not exist yet; the host starts the proxy with it", shown(&config));
        }
        let args = ["serve", "--stdio", "--config", &config.display().to_string()].map(str::to_string);
        let mut entry = json!({"command": program.display().to_string(), "args": args});
        if request.host == Host::Vscode {
            entry["type"] = json!("stdio");
        }
        return Ok(entry);
    };
    if request.host == Host::ClaudeDesktop {
        return Err("Claude Desktop starts its servers over stdio only: connect it without --http".into());
    }
    let mut entry = json!({"url": url});
    if let Some(variable) = &request.token_env {
        if !is_variable_name(variable) {
            return Err(format!("--token-env `{}` is not a variable name like PROXY_TOKEN", printable(variable)));
        }
        entry["headers"] = json!({"Authorization": format!("Bearer ${{env:{variable}}}")});
    }
    if request.host == Host::Vscode {
        entry["type"] = json!("http");
    }
    Ok(entry)
}

/// `root` with `entry` as the server `name` of the host's servers object (created when
/// missing), and the entry it replaces.
fn merged(mut root: Value, host: Host, name: &str, entry: Value) -> Result<(Value, Option<Value>), String> {
    let key = if host == Host::Vscode { "servers" } else { "mcpServers" };
    let Some(fields) = root.as_object_mut() else { return Err("not a JSON object".into()) };
    let servers = fields.entry(key).or_insert_with(|| Value::Object(Map::new()));
    let Some(servers) = servers.as_object_mut() else { return Err(format!("`{key}` is not an object")) };
    let previous = servers.insert(name.to_string(), entry);
    Ok((root, previous))
}

/// The entry before and after, on stderr.
fn show_change(file: &Path, name: &str, previous: Option<&Value>, entry: &Value, new_file: bool) {
    let pretty = |value: &Value| serde_json::to_string_pretty(value).expect("a JSON value serialises");
    let lines = |sign: char, value: &Value| {
        pretty(value).lines().map(|line| format!("{sign} {}", printable(line))).collect::<Vec<_>>().join("\n")
    };
    let what = if new_file { " (a new file)" } else { "" };
    eprintln!("{}{what}: server `{}`:", shown(file), printable(name));
    if let Some(previous) = previous {
        eprintln!("{}", lines('-', previous));
    }
    eprintln!("{}", lines('+', entry));
}

/// Keep the file as it was (its bytes, or a mark that it did not exist), unless an older backup
/// is there: that one holds the file from before the first `connect` and is kept.
fn keep_backup(file: &Path, before: Option<&[u8]>) -> Result<(), String> {
    let (backup, mark) = (backup_of(file), created_mark_of(file));
    if let Some(older) = [&backup, &mark].into_iter().find(|path| path.exists()) {
        eprintln!("{} is kept from an earlier `connect` (`--undo` restores that)", shown(older));
        return Ok(());
    }
    let (path, bytes) = match before {
        Some(bytes) => (&backup, bytes),
        None => (&mark, &[][..]),
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    let written = options.open(path).and_then(|mut out| std::io::Write::write_all(&mut out, bytes));
    written.map_err(|e| format!("cannot keep a backup at {}: {e}: nothing written", shown(path)))
}

/// Put the file back as it was before `connect` (or remove the file `connect` created), and
/// remove the backup.
fn undo(file: &Path, dry_run: bool) -> Result<(), String> {
    let (backup, mark) = (backup_of(file), created_mark_of(file));
    if backup.is_file() {
        eprintln!("{}: restored from {}", shown(file), shown(&backup));
        if dry_run {
            eprintln!("dry run: nothing written");
            return Ok(());
        }
        return std::fs::rename(&backup, file).map_err(|e| format!("cannot restore {}: {e}", shown(file)));
    }
    if mark.is_file() {
        eprintln!("{}: removed (`connect` created it)", shown(file));
        if dry_run {
            eprintln!("dry run: nothing written");
            return Ok(());
        }
        match std::fs::remove_file(file) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(format!("cannot remove {}: {error}", shown(file))),
        }
        return std::fs::remove_file(&mark).map_err(|e| format!("cannot remove {}: {e}", shown(&mark)));
    }
    Err(format!("{}: no backup from `connect` ({} is missing): nothing to undo", shown(file), shown(&backup)))
}

//! `import FILE` and `serve --mcp-json FILE`: a host's `mcpServers` file (the three committed
//! under tests/data/mcp-servers: Claude Desktop, Cursor, VS Code) becomes a config that `check`
//! accepts, with secrets as `${VAR}` references and every change reported on stderr; broken
//! entries are all named, nothing written. Serving the imported stdio entries with the real
//! peers is in the interop tier (`tests/interop/import.rs`); here `serve --mcp-json` brings up
//! the fixture and the folder server. Also `MCP_PROXY_CONFIG`. Hostile files and paths are in
//! `hostile`.

use std::process::{Output, Stdio};

use crate::support::PROXY_BIN;
use crate::support::fixture::{DEADLINE, Era, HttpFixture, connect_http, fixture_bin};
use crate::support::proxy::ProxyProcess;
use crate::support::reads::{read, text};
use crate::support::repo_root;
use anyhow::Context;
use tokio::process::Command;

mod hostile;
mod sandbox;

/// EX_CONFIG from sysexits.h.
pub(super) const EXIT_CONFIG: i32 = 78;

/// One committed servers file and what its import must say and write.
struct HostFile {
    path: &'static str,
    /// Upstream names in the written config.
    upstreams: &'static [&'static str],
    /// Variables the written config needs.
    variables: &'static [&'static str],
    /// (entry, words) of notes on stderr.
    notes: &'static [(&'static str, &'static str)],
    /// Literal secrets of the file, never written.
    secrets: &'static [&'static str],
}

const HOST_FILES: [HostFile; 3] = [
    HostFile {
        path: "tests/data/mcp-servers/claude_desktop_config.json",
        upstreams: &["everything-demo", "memory", "notes-folder"],
        variables: &["EVERYTHING_API_KEY"],
        notes: &[
            ("Everything (demo)", "renamed to `everything-demo`"),
            ("Everything (demo)", "set `EVERYTHING_API_KEY`"),
            ("notes_folder", "renamed to `notes-folder`"),
            ("old-tool", "disabled"),
        ],
        secrets: &["sk-test-4f9a2c7e1b3d5f8a0c2e4b6d"],
    },
    HostFile {
        path: "tests/data/mcp-servers/cursor/.cursor/mcp.json",
        upstreams: &["linear", "memory", "project-docs"],
        variables: &["HOME", "LINEAR_TOKEN"],
        notes: &[("linear", "set `LINEAR_TOKEN`"), ("playwright", "skipped: transport `sse`")],
        secrets: &["lin_api_Xq7Yh2Kd9Lm4Np6Rs8Tv0Wz"],
    },
    HostFile {
        path: "tests/data/mcp-servers/vscode/.vscode/mcp.json",
        upstreams: &["everything", "github", "remote-search", "workspace-files"],
        variables: &["EVERYTHING_LOG_LEVEL", "GITHUB_TOKEN", "REMOTE_SEARCH_API_KEY"],
        notes: &[
            ("everything", "input `github-token` (GitHub Personal Access Token) is read from `GITHUB_TOKEN`"),
            ("Remote Search", "renamed to `remote-search`"),
            ("Remote Search", "set `REMOTE_SEARCH_API_KEY`"),
            ("Remote Search", "`gallery` has no equivalent"),
            ("workspace_files", "renamed to `workspace-files`"),
        ],
        secrets: &["3f8a9b2c7d1e4f6a8b0c2d4e"],
    },
];

/// Each committed host file: `import -o` writes a config naming its upstreams, with no secret in
/// clear and the changes on stderr; `check` accepts it once the named variables are set, and
/// names them when they are not.
#[tokio::test]
async fn import_round_trips_the_three_host_files_through_check() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    for (index, host) in HOST_FILES.iter().enumerate() {
        let source = repo_root().join(host.path);
        let written = dir.path().join(format!("imported-{index}.toml"));
        let output = run(&["import", source.to_str().unwrap(), "--output", written.to_str().unwrap()], &[]).await?;
        let (_, notes) = texts(&output);
        assert_eq!(output.status.code(), Some(0), "{}: {notes}", host.path);
        let config = std::fs::read_to_string(&written)?;
        for name in host.upstreams {
            assert!(config.contains(&format!("name = \"{name}\"")), "{}: {name} in\n{config}", host.path);
        }
        assert_eq!(config.matches("[[upstreams]]").count(), host.upstreams.len(), "{}:\n{config}", host.path);
        for secret in host.secrets {
            assert!(!config.contains(secret) && !notes.contains(secret), "{}: a secret in clear", host.path);
        }
        for (entry, words) in host.notes {
            let found = notes.lines().any(|line| line.contains(&format!("`{entry}`")) && line.contains(words));
            assert!(found, "{}: a note on `{entry}` saying {words:?} in:\n{notes}", host.path);
        }
        let set: Vec<(&str, &str)> = host.variables.iter().map(|v| (*v, "value-for-test")).collect();
        let checked = run(&["check", "--config", written.to_str().unwrap()], &set).await?;
        let (out, err) = texts(&checked);
        assert_eq!(checked.status.code(), Some(0), "{}: check of\n{config}\n{out}{err}", host.path);
        let unset: Vec<(&str, &str)> = host.variables.iter().filter(|v| **v != "HOME").map(|v| (*v, "")).collect();
        let mut unset_check = command(&["check", "--config", written.to_str().unwrap()], &[]);
        for (variable, _) in &unset {
            unset_check.env_remove(variable);
        }
        let refused = output_of(unset_check).await?;
        assert_eq!(refused.status.code(), Some(EXIT_CONFIG), "{}", host.path);
        for (variable, _) in &unset {
            assert!(texts(&refused).0.contains(&format!("`{variable}` is not set")), "{}: {variable}", host.path);
        }
    }
    Ok(())
}

/// Without `--output` the config goes to stdout; an existing `--output` file is kept unless
/// `--force`.
#[tokio::test]
async fn import_writes_stdout_and_keeps_an_existing_output_file() -> anyhow::Result<()> {
    let source = repo_root().join(HOST_FILES[0].path);
    let output = run(&["import", source.to_str().unwrap()], &[]).await?;
    assert_eq!(output.status.code(), Some(0));
    assert!(texts(&output).0.contains("name = \"memory\""), "{}", texts(&output).0);
    let dir = tempfile::tempdir()?;
    let existing = dir.path().join("config.toml");
    std::fs::write(&existing, "# mine\n")?;
    let kept = run(&["import", source.to_str().unwrap(), "-o", existing.to_str().unwrap()], &[]).await?;
    assert_ne!(kept.status.code(), Some(0));
    assert!(texts(&kept).1.contains("exists"), "{}", texts(&kept).1);
    assert_eq!(std::fs::read_to_string(&existing)?, "# mine\n");
    let forced = run(&["import", source.to_str().unwrap(), "-o", existing.to_str().unwrap(), "--force"], &[]).await?;
    assert_eq!(forced.status.code(), Some(0));
    assert!(std::fs::read_to_string(&existing)?.contains("name = \"memory\""));
    Ok(())
}

/// A file with broken entries: exit 78, every broken entry named on stderr in one run, nothing
/// written; `serve --mcp-json` refuses it the same way before starting anything.
#[tokio::test]
async fn broken_entries_are_all_named_and_nothing_is_written() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let source = dir.path().join("claude_desktop_config.json");
    std::fs::write(
        &source,
        r#"{"mcpServers": {"fine": {"command": "npx"}, "empty": {}, "ws": {"type": "websocket", "url": "ws://h"},
            "argsless": {"command": "x", "args": "--flag"}, "ftp": {"url": "ftp://h/mcp"}}}"#,
    )?;
    let written = dir.path().join("out.toml");
    let output = run(&["import", source.to_str().unwrap(), "-o", written.to_str().unwrap()], &[]).await?;
    assert_eq!(output.status.code(), Some(EXIT_CONFIG));
    let (_, errors) = texts(&output);
    for place in ["mcpServers.empty", "mcpServers.ws.type", "mcpServers.argsless.args", "mcpServers.ftp.url"] {
        assert!(errors.contains(place), "{place} in:\n{errors}");
    }
    assert!(errors.contains("4 problems"), "{errors}");
    assert!(!written.exists(), "nothing written");
    let served = run(
        &["serve", "--listen", "127.0.0.1:0", "--admin-listen", "off", "--mcp-json", source.to_str().unwrap()],
        &[],
    )
    .await?;
    assert_eq!(served.status.code(), Some(EXIT_CONFIG), "{}", texts(&served).1);
    assert!(texts(&served).1.contains("mcpServers.ws.type"), "{}", texts(&served).1);
    Ok(())
}

/// `serve --mcp-json` serves a host's file directly: its stdio entries (the fixture, the
/// folder server) come up under their valid names, an `sse` entry is left out with a warning.
#[tokio::test]
async fn serve_mcp_json_brings_the_stdio_entries_up() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let docs = dir.path().join("docs");
    std::fs::create_dir(&docs)?;
    std::fs::write(docs.join("guide.md"), "# guide\n")?;
    let file = dir.path().join("mcp.json");
    let servers = serde_json::json!({"mcpServers": {
        "Fixture Server": {"command": fixture_bin().to_str().unwrap(), "args": []},
        "docs": {"command": PROXY_BIN, "args": ["serve-dir", docs.to_str().unwrap()]},
        "legacy": {"type": "sse", "url": "http://127.0.0.1:1/sse"},
    }});
    std::fs::write(&file, serde_json::to_string_pretty(&servers)?)?;
    let proxy = ProxyProcess::start_with("", &["--mcp-json", file.to_str().unwrap()], &[]).await?;
    proxy.wait_up("fixture-server", 1).await?;
    proxy.wait_up("docs", 1).await?;
    let status = proxy.status().await?;
    let names: Vec<&str> =
        status["upstreams"].as_array().context("upstreams")?.iter().filter_map(|u| u["name"].as_str()).collect();
    assert_eq!(names.len(), 2, "{status}");
    proxy.wait_log(&["legacy", "sse"]).await?;
    Ok(())
}

/// `serve --mcp-json` serves a Claude Desktop file as it is: an entry's literal API key in `env`
/// reaches its stdio upstream (the fixture echoes it back on a read), an entry's literal
/// `Authorization` header is used for its HTTP upstream, even with the variable the import
/// would name set to something else in the proxy's environment; the key shows neither in the
/// proxy's stderr nor in `/status`.
#[tokio::test]
async fn serve_mcp_json_uses_the_files_literal_secrets_in_memory() -> anyhow::Result<()> {
    const KEY: &str = "sk-test-9c1e5a7b3d2f4e6a8b0c1d3e";
    const BEARER: &str = "Bearer ghp_Q3w9Zr7Xk2Lm5Np8Rs1Tv4Wy6Ab0Cd2Ef";
    let http = HttpFixture::spawn(&["--prefix", "web"]).await?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("claude_desktop_config.json");
    let servers = serde_json::json!({"mcpServers": {
        "keyed": {"command": fixture_bin().to_str().unwrap(), "env": {"FIXTURE_API_KEY": KEY}},
        "web": {"url": http.url, "headers": {"Authorization": BEARER}},
    }, "globalShortcut": "Alt+Space"});
    std::fs::write(&file, serde_json::to_string_pretty(&servers)?)?;
    let env = [("FIXTURE_API_KEY", "from-the-environment")];
    let proxy = ProxyProcess::start_with("", &["--mcp-json", file.to_str().unwrap()], &env).await?;
    proxy.wait_up("keyed", 1).await?;
    proxy.wait_up("web", 1).await?;
    let (host, _events) = connect_http(&proxy.url, Era::Legacy).await?;
    assert_eq!(text(&read(host.peer(), "keyed+fx://fx/env/FIXTURE_API_KEY").await?), KEY);
    assert!(!text(&read(host.peer(), "web+fx://web/item/0").await?).is_empty());
    let status = proxy.status().await?.to_string();
    let logs = proxy.logs().join("\n");
    for secret in [KEY, "ghp_Q3w9Zr7Xk2Lm5Np8Rs1Tv4Wy6Ab0Cd2Ef"] {
        assert!(!status.contains(secret), "/status shows a secret: {status}");
        assert!(!logs.contains(secret), "the logs show a secret:\n{logs}");
    }
    assert!(!logs.contains("set `FIXTURE_API_KEY`"), "nothing is to be set:\n{logs}");
    Ok(())
}

/// `MCP_PROXY_CONFIG` names the config file for `check` (and `serve`, `policy explain`), and is
/// not taken for a setting of the config.
#[tokio::test]
async fn mcp_proxy_config_names_the_config_file() -> anyhow::Result<()> {
    let elsewhere = tempfile::tempdir()?;
    let shipped = repo_root().join("config.toml");
    let mut check = command(&["check"], &[("MCP_PROXY_CONFIG", shipped.to_str().unwrap())]);
    check.current_dir(elsewhere.path());
    let output = output_of(check).await?;
    let (out, err) = texts(&output);
    assert_eq!(output.status.code(), Some(0), "{out}{err}");
    assert!(out.contains(&format!("{}: valid", shipped.display())), "{out}");
    Ok(())
}

pub(super) fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(PROXY_BIN);
    command.args(args).envs(env.iter().copied()).stdin(Stdio::null()).kill_on_drop(true);
    command
}

pub(super) async fn run(args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Output> {
    output_of(command(args, env)).await
}

pub(super) async fn output_of(mut command: Command) -> anyhow::Result<Output> {
    tokio::time::timeout(DEADLINE, command.output()).await.context("the command did not exit")?.map_err(Into::into)
}

/// (stdout, stderr).
pub(super) fn texts(output: &Output) -> (String, String) {
    (String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned())
}

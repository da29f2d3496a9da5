//! `connect HOST` on the real binary, in a temporary HOME and folder, for each host's format (the
//! committed files of tests/data/mcp-servers as they were): the proxy's entry is merged in with
//! the other servers and keys kept, the backup imports as the original did, `--undo` gives the
//! file back byte for byte, `--dry-run` writes nothing, a missing file is created and removed.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use anyhow::Context;
use serde_json::Value;
use tokio::process::Command;

use super::{EXIT_CONFIG, stderr, stdout};
use crate::support::PROXY_BIN;
use crate::support::fixture::DEADLINE;
use crate::support::repo_root;

/// One host: its name on the command line, its usual file (under the temporary HOME or
/// folder), the committed sample, and the key of its servers.
struct HostCase {
    host: &'static str,
    file: &'static str,
    sample: &'static str,
    servers: &'static str,
}

const HOSTS: [HostCase; 3] = [
    HostCase {
        host: "claude-desktop",
        file: ".config/Claude/claude_desktop_config.json",
        sample: "tests/data/mcp-servers/claude_desktop_config.json",
        servers: "mcpServers",
    },
    HostCase {
        host: "cursor",
        file: ".cursor/mcp.json",
        sample: "tests/data/mcp-servers/cursor/.cursor/mcp.json",
        servers: "mcpServers",
    },
    HostCase {
        host: "vscode",
        file: ".vscode/mcp.json",
        sample: "tests/data/mcp-servers/vscode/.vscode/mcp.json",
        servers: "servers",
    },
];

/// For each host, at its usual path: `connect` keeps every other server and key and adds the
/// proxy's stdio entry (this binary, `serve --stdio --config <absolute path>`); the backup is
/// the original, byte for byte, and imports to the same config; `--undo` restores the file
/// byte for byte and removes the backup.
#[tokio::test]
async fn connect_merges_the_proxy_and_undo_restores_the_file_byte_for_byte() -> anyhow::Result<()> {
    for case in &HOSTS {
        let home = tempfile::tempdir()?;
        let file = home.path().join(case.file);
        std::fs::create_dir_all(file.parent().context("a folder")?)?;
        let original = std::fs::read(repo_root().join(case.sample))?;
        std::fs::write(&file, &original)?;
        let imported_before = import(&file, home.path()).await?;
        let config = home.path().join("proxy.toml");

        let output = run_in(&["connect", case.host, "--config", config.to_str().unwrap()], home.path()).await?;
        assert_eq!(output.status.code(), Some(0), "{}: {}", case.host, stderr(&output));
        assert!(stderr(&output).contains("+ "), "{}: the change is shown:\n{}", case.host, stderr(&output));
        let before: Value = serde_json::from_slice(&original)?;
        let after: Value = serde_json::from_slice(&std::fs::read(&file)?)?;
        let entry = &after[case.servers]["mcp-resource-proxy"];
        assert_eq!(entry["command"], Value::from(PROXY_BIN), "{}: {after}", case.host);
        let args = ["serve", "--stdio", "--config", config.to_str().unwrap()];
        assert_eq!(entry["args"], serde_json::json!(args), "{}", case.host);
        for (key, value) in before.as_object().context("an object")? {
            if key != case.servers {
                assert_eq!(&after[key], value, "{}: `{key}` kept", case.host);
            }
        }
        for (name, server) in before[case.servers].as_object().context("servers")? {
            assert_eq!(&after[case.servers][name], server, "{}: server `{name}` kept", case.host);
        }
        let backup = backup_of(&file);
        assert_eq!(std::fs::read(&backup)?, original, "{}: the backup is the original", case.host);
        assert_eq!(import(&backup, home.path()).await?, imported_before, "{}", case.host);

        let output = run_in(&["connect", case.host, "--undo"], home.path()).await?;
        assert_eq!(output.status.code(), Some(0), "{}: {}", case.host, stderr(&output));
        assert_eq!(std::fs::read(&file)?, original, "{}: restored byte for byte", case.host);
        assert!(!backup.exists(), "{}: the backup is removed", case.host);
    }
    Ok(())
}

/// `--dry-run` shows the change and writes nothing (no file, no backup); a missing file is
/// created (with its folder) and `--undo` removes it; `--undo` with no backup is an error.
#[tokio::test]
async fn connect_dry_run_writes_nothing_and_a_created_file_is_undone() -> anyhow::Result<()> {
    let folder = tempfile::tempdir()?;
    let file = folder.path().join(".vscode/mcp.json");
    let dry = run_in(&["connect", "vscode", "--dry-run"], folder.path()).await?;
    assert_eq!(dry.status.code(), Some(0), "{}", stderr(&dry));
    assert!(stderr(&dry).contains("mcp-resource-proxy"), "{}", stderr(&dry));
    assert!(!folder.path().join(".vscode").exists(), "nothing written");

    let output = run_in(&["connect", "vscode", "--name", "resources"], folder.path()).await?;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let written: Value = serde_json::from_slice(&std::fs::read(&file)?)?;
    assert_eq!(written["servers"]["resources"]["type"], "stdio", "{written}");
    let undone = run_in(&["connect", "vscode", "--undo"], folder.path()).await?;
    assert_eq!(undone.status.code(), Some(0), "{}", stderr(&undone));
    assert!(!file.exists(), "the created file is removed");
    assert_eq!(std::fs::read_dir(folder.path().join(".vscode"))?.count(), 0, "no mark is left");

    let again = run_in(&["connect", "vscode", "--undo"], folder.path()).await?;
    assert_eq!(again.status.code(), Some(EXIT_CONFIG), "{}", stdout(&again));
    assert!(stderr(&again).contains("nothing to undo"), "{}", stderr(&again));
    Ok(())
}

/// `--http URL --token-env VAR` writes a streamable HTTP entry whose header names the variable
/// (Cursor's `${env:…}`); Claude Desktop refuses `--http` and nothing is written.
#[tokio::test]
async fn connect_over_http_names_the_token_variable() -> anyhow::Result<()> {
    let home = tempfile::tempdir()?;
    let url = "http://127.0.0.1:8080/mcp";
    let args = ["connect", "cursor", "--http", url, "--token-env", "PROXY_TOKEN"];
    let output = run_in(&args, home.path()).await?;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let written: Value = serde_json::from_slice(&std::fs::read(home.path().join(".cursor/mcp.json"))?)?;
    let entry = &written["mcpServers"]["mcp-resource-proxy"];
    assert_eq!(entry["url"], url, "{written}");
    assert_eq!(entry["headers"]["Authorization"], "Bearer ${env:PROXY_TOKEN}", "{written}");

    let refused = run_in(&["connect", "claude-desktop", "--http", url], home.path()).await?;
    assert_eq!(refused.status.code(), Some(EXIT_CONFIG), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("stdio"), "{}", stderr(&refused));
    assert!(!home.path().join(".config").exists(), "nothing written");
    Ok(())
}

fn backup_of(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".mcp-resource-proxy.bak");
    PathBuf::from(name)
}

/// The config `import FILE` writes (what the servers of the file are).
async fn import(file: &Path, folder: &Path) -> anyhow::Result<String> {
    let output = run_in(&["import", file.to_str().unwrap()], folder).await?;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    Ok(stdout(&output))
}

/// Run the binary in `folder` with `HOME` there (its usual files are under it), stdin closed.
async fn run_in(args: &[&str], folder: &Path) -> anyhow::Result<Output> {
    let mut command = Command::new(PROXY_BIN);
    command.args(args).current_dir(folder).env("HOME", folder).stdin(Stdio::null()).kill_on_drop(true);
    tokio::time::timeout(DEADLINE, command.output())
        .await
        .with_context(|| format!("{args:?} did not exit"))?
        .map_err(Into::into)
}

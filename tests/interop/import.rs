//! The three committed host files (tests/data/mcp-servers: Claude Desktop, Cursor
//! `.cursor/mcp.json`, VS Code `.vscode/mcp.json`) served for real: imported and served
//! (Claude Desktop, Cursor) or served with `serve --mcp-json` (VS Code), their stdio entries —
//! npm `mcp-server-memory` and `mcp-server-everything` (the pinned peers, their `.bin` on the
//! proxy's `PATH` as after `npm install -g`) and this build's `mcp-resource-proxy serve-dir` —
//! come up; the variables the import named are set, the HTTP entries (nothing listening) stay down.
//! And the sandbox profiles `import` suggests for servers people run from npm (docs/sandbox.md).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{Context, ensure};
use serde_json::json;

use crate::servers_people_run::call_text;
use crate::support::PROXY_BIN;
use crate::support::eventually;
use crate::support::fixture::{self, DEADLINE, Era};
use crate::support::peers::{FILESYSTEM_PKG, ensure_installed, repo_root};
use crate::support::proxy::ProxyProcess;

/// (file, how it is served, its stdio upstreams, the variables its import names).
const FILES: [(&str, Serve, &[&str], &[&str]); 3] = [
    (
        "tests/data/mcp-servers/claude_desktop_config.json",
        Serve::Imported,
        &["everything-demo", "memory", "notes-folder"],
        &["EVERYTHING_API_KEY"],
    ),
    ("tests/data/mcp-servers/cursor/.cursor/mcp.json", Serve::Imported, &["memory", "project-docs"], &["LINEAR_TOKEN"]),
    (
        "tests/data/mcp-servers/vscode/.vscode/mcp.json",
        Serve::McpJson,
        &["everything", "workspace-files"],
        &["EVERYTHING_LOG_LEVEL", "GITHUB_TOKEN", "REMOTE_SEARCH_API_KEY"],
    ),
];

#[derive(Clone, Copy)]
enum Serve {
    /// `import FILE`, then `serve --config` of what it wrote.
    Imported,
    /// `serve --mcp-json FILE`.
    McpJson,
}

#[tokio::test]
async fn the_three_host_files_bring_their_stdio_servers_up() -> anyhow::Result<()> {
    ensure_installed();
    let home = tempfile::tempdir()?;
    let bins = repo_root().join(".peers/npm/node_modules/.bin");
    let own = Path::new(PROXY_BIN).parent().expect("target dir");
    let path = format!("{}:{}:{}", bins.display(), own.display(), std::env::var("PATH").unwrap_or_default());
    for (file, serve, stdio, variables) in FILES {
        let source = repo_root().join(file);
        let mut env: Vec<(&str, &str)> = variables.iter().map(|v| (*v, "set-by-test")).collect();
        env.extend([("PATH", path.as_str()), ("HOME", home.path().to_str().unwrap())]);
        let proxy = match serve {
            Serve::Imported => {
                let output = tokio::process::Command::new(PROXY_BIN).arg("import").arg(&source).output().await?;
                anyhow::ensure!(output.status.success(), "{file}: {}", String::from_utf8_lossy(&output.stderr));
                ProxyProcess::start_with(&String::from_utf8(output.stdout)?, &[], &env).await?
            }
            Serve::McpJson => ProxyProcess::start_with("", &["--mcp-json", source.to_str().unwrap()], &env).await?,
        };
        for upstream in stdio {
            proxy.wait_up(upstream, 1).await.map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
        }
    }
    Ok(())
}

/// A Claude Desktop file as people write it: server-filesystem run by `node` from its installed
/// package with a folder, server-memory by its npm bin with its file in a folder. `import`
/// writes both without a sandbox and says the profile it suggests for each; the written config
/// serves both, each usable (a listing, an entity created and read back); and server-filesystem,
/// given the profile suggested for it (its `node_modules` read, its folder written, the network
/// on), lists, reads and writes its folder.
#[tokio::test(flavor = "multi_thread")]
async fn imported_servers_start_and_server_filesystem_serves_under_its_suggested_profile() -> anyhow::Result<()> {
    ensure_installed();
    let ground = tempfile::tempdir()?;
    let ground_path = ground.path().canonicalize()?;
    let folder = ground_path.join("notes");
    std::fs::create_dir(&folder)?;
    std::fs::write(folder.join("hello.txt"), "hello from a suggested sandbox")?;
    // Open to user nobody, whom a root proxy runs a sandboxed server as: only the sandbox refuses.
    for (path, mode) in [(&ground_path, 0o777), (&folder, 0o777)] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    let packages = repo_root().join(".peers/servers/node_modules");
    let script = packages.join(FILESYSTEM_PKG).join("dist/index.js");
    let servers = json!({"mcpServers": {
        "filesystem": {"command": "node", "args": [script, folder]},
        "memory": {"command": "mcp-server-memory", "env": {"MEMORY_FILE_PATH": ground_path.join("memory.jsonl")}},
    }});
    let file = ground_path.join("claude_desktop_config.json");
    std::fs::write(&file, serde_json::to_string_pretty(&servers)?)?;
    let home = tempfile::tempdir()?;
    let bins = repo_root().join(".peers/npm/node_modules/.bin");
    let path = format!("{}:{}", bins.display(), std::env::var("PATH").unwrap_or_default());
    let env = [("PATH", path.as_str()), ("HOME", home.path().to_str().unwrap())];
    let output = tokio::process::Command::new(PROXY_BIN).arg("import").arg(&file).envs(env).output().await?;
    let said = String::from_utf8_lossy(&output.stderr);
    ensure!(output.status.success(), "{said}");
    let suggested = format!(
        "`filesystem`: no sandbox written (a script or interpreter: what it loads may lie outside the system's \
         folders); a profile to start from: read = [{:?}], write = [{:?}], network = true, keep_env = []",
        packages.display().to_string(),
        folder.display().to_string(),
    );
    ensure!(said.contains(&suggested), "{said}");
    ensure!(said.contains("`memory`: no sandbox written (a script or interpreter"), "{said}");
    let written = String::from_utf8(output.stdout)?;
    ensure!(!written.contains("[upstreams.sandbox]"), "{written}");

    let proxy = ProxyProcess::start_with(&written, &[], &env).await?;
    proxy.wait_up("filesystem", 1).await?;
    proxy.wait_up("memory", 1).await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let listing = call_text(host.peer(), "filesystem__list_directory", json!({ "path": folder })).await?;
    ensure!(listing.contains("[FILE] hello.txt"), "{listing}");
    let entity = json!({"name": "proxy", "entityType": "service", "observations": ["imported"]});
    call_text(host.peer(), "memory__create_entities", json!({"entities": [entity]})).await?;
    let graph = call_text(host.peer(), "memory__read_graph", json!({})).await?;
    ensure!(graph.contains("\"proxy\""), "{graph}");
    host.cancel().await?;
    drop(proxy);

    let mut config: toml_edit::DocumentMut = written.parse()?;
    let upstreams = config["upstreams"].as_array_of_tables_mut().context("upstreams")?;
    upstreams.retain(|upstream| upstream.get("name").and_then(|name| name.as_str()) == Some("filesystem"));
    let mut sandbox = toml_edit::Table::new();
    sandbox.insert("read", toml_edit::value(toml_edit::Array::from_iter([packages.to_str().unwrap()])));
    sandbox.insert("write", toml_edit::value(toml_edit::Array::from_iter([folder.to_str().unwrap()])));
    sandbox.insert("network", toml_edit::value(true));
    upstreams.get_mut(0).context("filesystem")?.insert("sandbox", toml_edit::Item::Table(sandbox));
    let proxy = ProxyProcess::start_with(&config.to_string(), &[], &env).await?;
    proxy.wait_up("filesystem", 1).await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let listing = eventually(DEADLINE, "server-filesystem lists its folder in its sandbox", || {
        call_text(host.peer(), "filesystem__list_directory", json!({ "path": folder }))
    })
    .await?;
    ensure!(listing.contains("[FILE] hello.txt"), "{listing}");
    let read =
        call_text(host.peer(), "filesystem__read_text_file", json!({ "path": folder.join("hello.txt") })).await?;
    ensure!(read == "hello from a suggested sandbox", "{read}");
    let written_file = json!({ "path": folder.join("new.txt"), "content": "written in the suggested sandbox" });
    call_text(host.peer(), "filesystem__write_file", written_file).await?;
    ensure!(std::fs::read_to_string(folder.join("new.txt"))? == "written in the suggested sandbox");
    Ok(())
}

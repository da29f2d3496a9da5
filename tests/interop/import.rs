//! The three committed host files (tests/data/mcp-servers: Claude Desktop, Cursor
//! `.cursor/mcp.json`, VS Code `.vscode/mcp.json`) served for real: imported and served
//! (Claude Desktop, Cursor) or served with `serve --mcp-json` (VS Code), their stdio entries —
//! npm `mcp-server-memory` and `mcp-server-everything` (the pinned peers, their `.bin` on the
//! proxy's `PATH` as after `npm install -g`) and this build's `mcp-resource-proxy serve-dir` —
//! come up; the variables the import named are set, the HTTP entries (nothing listening) stay down.

use std::path::Path;

use crate::support::peers::{ensure_installed, repo_root};
use crate::support::proxy::{PROXY_BIN, ProxyProcess};

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

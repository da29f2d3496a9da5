//! Third-party processes for the `matrix` scenario, installed into the repository's `.peers/`:
//! npm `@modelcontextprotocol/server-everything` (by `.ci/install-peers.sh`) and npm `mcp-proxy`
//! (by `.ci/install-bench-peers.sh`). Each is spawned on a free loopback port and killed on drop.
//!
//! Invariant: nothing is downloaded here; a missing peer is an error that names the script to run.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

use crate::raw::{HostEra, RawClient};

/// How long a peer may take to listen.
const START_DEADLINE: Duration = Duration::from_secs(60);

/// An HTTP peer process; killed on drop.
pub struct PeerProcess {
    pub url: String,
    pub pid: u32,
    _child: Child,
}

/// `.peers/` of this repository (two levels above this crate).
fn peers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.peers")
}

/// server-everything's entry point, as `node` arguments.
pub fn everything_entry() -> anyhow::Result<String> {
    let entry = peers_dir().join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !entry.is_file() {
        bail!("{} missing: run `bash .ci/install-bench-peers.sh`", entry.display());
    }
    entry.to_str().map(str::to_owned).context("server-everything path is not UTF-8")
}

fn mcp_proxy_entry() -> anyhow::Result<String> {
    let entry = peers_dir().join("bench-npm/node_modules/mcp-proxy/dist/bin/mcp-proxy.mjs");
    if !entry.is_file() {
        bail!("{} missing: run `bash .ci/install-bench-peers.sh`", entry.display());
    }
    entry.to_str().map(str::to_owned).context("mcp-proxy path is not UTF-8")
}

impl PeerProcess {
    /// server-everything in `streamableHttp` mode.
    pub async fn everything_http() -> anyhow::Result<Self> {
        let port = free_port()?;
        let mut command = Command::new("node");
        command.arg(everything_entry()?).arg("streamableHttp").env("PORT", port.to_string());
        Self::spawn(command, port, "/mcp").await
    }

    /// npm `mcp-proxy` serving server-everything (over stdio) at `/mcp`, both eras.
    pub async fn mcp_proxy_over_everything() -> anyhow::Result<Self> {
        let port = free_port()?;
        let mut command = Command::new("node");
        command
            .arg(mcp_proxy_entry()?)
            .args(["--host", "127.0.0.1", "--port", &port.to_string(), "--server", "stream", "--"])
            .args(["node", &everything_entry()?, "stdio"]);
        Self::spawn(command, port, "/mcp").await
    }

    async fn spawn(mut command: Command, port: u16, path: &str) -> anyhow::Result<Self> {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("spawn node (is Node.js installed?)")?;
        // Both log per request: drain them so they never block.
        drain(child.stdout.take().context("stdout")?);
        drain(child.stderr.take().context("stderr")?);
        let pid = child.id().context("peer exited at once")?;
        let url = format!("http://127.0.0.1:{port}{path}");
        let deadline = Instant::now() + START_DEADLINE;
        // Bounded poll: the peer is ready once a 2025 session opens.
        loop {
            match RawClient::connect(&url, HostEra::Y2025).await {
                Ok(_) => return Ok(Self { url, pid, _child: child }),
                Err(error) if Instant::now() > deadline => return Err(error.context(format!("{url} never answered"))),
                Err(_) => {}
            }
            if let Some(status) = child.try_wait()? {
                bail!("peer at {url} exited before listening: {status}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn drain(stream: impl AsyncRead + Unpin + Send + 'static) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(_)) = lines.next_line().await {}
    });
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
